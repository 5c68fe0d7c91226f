"""The shipped problem set on one GPU, one command: for every problem its automatic SOL (meta tensors)
and the reference's eager and torch.compile times (CUDA events, inputs made on the device), in a
table printed last and a JSON file rewritten after every step (a run cut short keeps what it had).

    PYTHONPATH=src python3 benchmarks/problems_table.py --out DIR [--chip h200] [--budget-s 360]

Without CUDA (the development CPU) it still runs: SOL only, every time labelled "not measured: no
CUDA device". Two passes: SOL + eager for all problems first, then torch.compile while the budget
(timing seconds) lasts, so the eager column is always complete."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from rich.console import Console

from formloop.cli.problems_cmd import problems_table
from formloop.evaluate.reference import UNITS, _device_name, problem_rows

ROOT = Path(__file__).resolve().parent.parent / "problems"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for problems_table.json")
    ap.add_argument("--root", type=Path, default=ROOT, help="problem set (default: the shipped problems/)")
    ap.add_argument("--chip", default="h200")
    ap.add_argument("--budget-s", type=float, default=360.0, help="timing seconds before compile timings stop")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--small", action="store_true", help="SMALL sizes (a quick check of the command itself)")
    ap.add_argument("--level", type=int, action="append", default=[])
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "problems_table.json"
    started = time.time()
    seen: dict[str, dict] = {}

    def dump(row: dict, step: int, steps: int) -> None:
        seen[row["id"]] = row
        path.write_text(json.dumps({"chip": args.chip, "device": _device_name(), "host": platform.node(),
                                    "small": args.small, "started": started, "step": step, "steps": steps,
                                    "units": UNITS, "rows": list(seen.values())}, indent=1, default=str))
        print(f"[{step}/{steps}] {row['id']}: eager {row['eager_s']} s, compiled {row['compiled_s']} s "
              f"({row['eager_note'] or row['compiled_note'] or 'ok'})", file=sys.stderr, flush=True)

    rows = problem_rows(args.root, args.chip, compile_too=not args.no_compile, small=args.small,
                        levels=tuple(args.level), budget_s=args.budget_s, on_row=dump)
    Console(width=200).print(problems_table(rows, args.chip, _device_name()))
    print(f"wall {time.time() - started:.1f} s; JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
