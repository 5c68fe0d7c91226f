"""Issue 13 on one GPU in one command (<= 9 minutes on an H200): three parts, each in its own process
under its own wall-clock budget, each writing its table to DIR as it goes, so a part cut short (or a
later part never reached) leaves what was measured.

    PYTHONPATH=src python3 benchmarks/problems_gpu.py --out DIR [--total-s 520] [--dry-run]

  1. suite     the planted-cheat and honest integrity suites at small size, sandboxed, several cases
               at once (benchmarks/integrity_suite.py --only suite): every cheat flagged by its
               detector, every honest candidate clean.
  2. large     harness and whole integrity battery on 4096 x 393216 fp32 ReLU and softmax
               (integrity_suite.py --only large): honest Triton kernels correct within 30 s (harness)
               and 90 s (battery); the fingerprint-cache cheat warned by the harness (faster than the
               SOL floor of the device's own chip, no --chip given) and judged gaming by the battery.
  3. problems  the shipped problem set (problems/): automatic SOL (meta tensors) and the reference's
               eager and torch.compile times (benchmarks/problems_table.py), compile timings while
               the budget lasts.

Budgets: suite 170 s, large 170 s, problems the rest of --total-s (time a part leaves unused goes to
the next). Each part stops starting work when its budget is spent and is killed 30 s after it.
Output: DIR/summary.md (the three tables; printed at the end), DIR/device.json, DIR/<part>.log and
each part's own JSON (DIR/suite/, DIR/large/, DIR/problems/). Without CUDA (the development CPU)
every part runs its CPU path (Triton interpreter, large problems shrunk, no reference times);
--dry-run shrinks the budgets to a quick check of the command itself."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRACE_S = 30.0
SHARES = {"suite": 170.0, "large": 170.0}
DRY = {"suite": 45.0, "large": 60.0, "problems": 40.0}


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the session a part was started in (the part and what it spawned)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                continue


def run_part(name: str, argv: list[str], budget_s: float, out: Path) -> dict:
    """Run one part in its own session, its output to DIR/<name>.log; killed GRACE_S after its budget."""
    log = out / f"{name}.log"
    t0 = time.monotonic()
    print(f"[{name}] budget {budget_s:.0f} s: {' '.join(argv[1:])}", flush=True)
    with log.open("w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "src")})
        try:
            code = proc.wait(timeout=budget_s + GRACE_S)
            how = f"exit {code}"
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            proc.wait()
            how = f"killed after {budget_s + GRACE_S:.0f} s"
    dt = time.monotonic() - t0
    print(f"[{name}] {how}, {dt:.1f} s (wall); log {log}", flush=True)
    return {"part": name, "budget_s": budget_s, "seconds": dt, "ended": how}


def problems_md(path: Path) -> str:
    """The problem table from problems_table.json (rewritten after every row: complete or not)."""
    if not path.is_file():
        return "no problems_table.json: the part did not reach its first row\n"
    d = json.loads(path.read_text())
    rows = d.get("rows", [])
    us = lambda s: "-" if s is None else f"{s * 1e6:.4g}"  # noqa: E731
    lines = [f"SOL on {d['chip']} (meta tensors); reference times on {d['device']} (gpu, CUDA events, median); "
             f"step {d['step']} of {d['steps']}", "",
             "| problem | bound | floor us (sol) | eager us | compiled us | eager/SOL | compiled/SOL | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        floor, e, c = r.get("floor_s"), r.get("eager_s"), r.get("compiled_s")
        notes = [n for n in (r.get("eager_note"), r.get("compiled_note")) if n]
        if r.get("lower_bound"):
            notes.insert(0, "LOWER bound")
        if r.get("sol_error"):
            notes.insert(0, f"SOL failed: {r['sol_error']}")
        lines.append(f"| {r['id']} | {r.get('bound', '-')} | {us(floor)} | {us(e)} | {us(c)} | "
                     f"{ratio(e / floor if e and floor else None)} | {ratio(c / floor if c and floor else None)} | "
                     f"{'; '.join(dict.fromkeys(notes))[:60]} |")
    measured = sum(r.get("eager_s") is not None for r in rows)
    compiled = sum(r.get("compiled_s") is not None for r in rows)
    lines.append(f"\n{len(rows)} problems; eager measured {measured}, compiled {compiled}")
    return "\n".join(lines) + "\n"


def part_md(path: Path, missing: str) -> str:
    return path.read_text() if path.is_file() else missing + "\n"


def write_summary(out: Path, head: dict, parts: list[dict]) -> str:
    text = [f"# Issue 13 GPU run: {head['device']}", "",
            f"torch {head['torch']}, triton {head.get('triton', '-')}; device state before: {head.get('state')}",
            "", "parts: " + "; ".join(f"{p['part']} {p['seconds']:.0f} s of {p['budget_s']:.0f} s ({p['ended']})"
                                      for p in parts), ""]
    text += ["## 1. planted and honest suites (small size, sandboxed)", "",
             part_md(out / "suite" / "integrity_suite.md", "not reached"),
             "## 2. large problems (4096 x 393216 fp32)", "",
             part_md(out / "large" / "integrity_suite.md", "not reached"),
             "## 3. shipped problems", "", problems_md(out / "problems" / "problems_table.json")]
    body = "\n".join(text)
    (out / "summary.md").write_text(body)
    return body


HEAD = """
import json, torch
head = {"device": "cpu (no CUDA)", "torch": torch.__version__}
try:
    import triton
    head["triton"] = triton.__version__
except ImportError:
    pass
if torch.cuda.is_available():
    from formloop.measure.device import device_facts, read_device_state
    head.update(device=torch.cuda.get_device_name(0), facts=device_facts(0), state=read_device_state(0))
print(json.dumps(head, default=str))
"""


def device_head() -> dict:
    """Device name, facts and clocks, read in a child: this process never holds a CUDA context."""
    proc = subprocess.run([sys.executable, "-c", HEAD], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "src")})
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"device": "unknown", "torch": "?", "error": proc.stderr[-500:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for summary.md, logs and JSON")
    ap.add_argument("--total-s", type=float, default=520.0, help="wall-clock budget of all three parts (s)")
    ap.add_argument("--dry-run", action="store_true", help="tiny budgets: check the command itself")
    ap.add_argument("--jobs", type=int, default=4, help="suite cases at once")
    args = ap.parse_args(argv)
    if not 60 <= args.total_s <= 3600:
        ap.error(f"--total-s {args.total_s}: allowed 60 ... 3600")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    head = device_head()
    (out / "device.json").write_text(json.dumps(head, indent=1, default=str))
    print(f"device: {head['device']}; torch {head['torch']}; total budget {args.total_s:.0f} s", flush=True)
    left = lambda: args.total_s - (time.monotonic() - started)  # noqa: E731
    py, parts = sys.executable, []
    shares = DRY if args.dry_run else SHARES

    def budget(name: str, floor: float = 20.0) -> float:
        return max(floor, min(shares.get(name, float("inf")), left() - GRACE_S))

    b = budget("suite")
    parts.append(run_part("suite", [py, str(HERE / "integrity_suite.py"), "--only", "suite", "--out",
                                    str(out / "suite"), "--jobs", str(args.jobs), "--budget-s", f"{b:.0f}",
                                    "--timeout", "60"], b, out))
    write_summary(out, head, parts)
    b = budget("large")
    parts.append(run_part("large", [py, str(HERE / "integrity_suite.py"), "--only", "large", "--out",
                                    str(out / "large"), "--budget-s", f"{b:.0f}", "--timeout", "120"], b, out))
    write_summary(out, head, parts)
    b = budget("problems")
    parts.append(run_part("problems", [py, str(HERE / "problems_table.py"), "--out", str(out / "problems"),
                                       "--chip", "h200", "--budget-s", f"{max(0.0, b - 60):.0f}"]
                          + (["--no-compile"] if args.dry_run else []), b, out))
    print("\n" + write_summary(out, head, parts), flush=True)
    print(f"wall {time.monotonic() - started:.1f} s; summary: {out / 'summary.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
