"""Store fault injection (issue 12): damaged files, kill -9 of writers, concurrent cold-store proofs,
and what the open-time checks cost. CPU only; one command:

    PYTHONPATH=src python3 benchmarks/store_faults.py --out DIR [--kills 20] [--rows 50000]

Prints a compact table last and writes the full results to DIR/store_faults.json. The 'two
transactions' rows replay the old write path (design, then measurement, each committed alone) to
show the fault the single transaction removes."""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from formloop.errors import FormloopError  # noqa: E402
from formloop.population import MeasurementFact, Population  # noqa: E402
from formloop.population.maintenance import check_store  # noqa: E402
from formloop.verify.proofstore import ProofStore  # noqa: E402
from tests.storecases import CHIP, DAMAGE, GEMM, seed_store, snapshot  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
WRITER = textwrap.dedent("""
    import itertools, sys
    from formloop.population import MeasurementFact, Population
    from tests.storecases import CHIP, GEMM
    path, start, together = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    facts = [MeasurementFact("model", "cpu", 1e-6), MeasurementFact("gpu", "h200", None, failure="x")]
    with Population(path) as p:
        for i in itertools.count(start):
            kw = dict(workload=f"gemm fp32 M={i + 1} N=1 K=1", chip=CHIP, assignment={"i": i}, predicted=1.0,
                      unit="us", solver="milp")
            if together:
                p.add_design_with_measurements(GEMM.content_hash, measurements=facts, **kw)
            else:  # the old path: three commits per design
                d = p.add_design(GEMM.content_hash, **kw)
                for f in facts:
                    p.add_measurement(d, workload=kw["workload"], chip=CHIP, tier=f.tier, device=f.device,
                                      latency_s=f.latency_s, failure=f.failure)
            print(i, flush=True)
""")
PROVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from formloop.population import Population
    from tests.storecases import GEMM, cert
    path, go, log, claim = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
    Path(f"{go}.ready-{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.005)
    def prove(p):
        with open(log, "a") as f:
            f.write("x\\n")
        time.sleep(1.0)  # stands in for the verifier
        p.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM), toolchain="tc")
    with Population(path) as p:
        if claim:
            with p.claim_proof(GEMM.content_hash, "tc") as c:
                if c.owned:
                    prove(p)
        elif p.latest_certificate(GEMM.content_hash, "tc") is None:  # the old check-then-prove
            prove(p)
""")


def damage_matrix(work: Path) -> list[dict]:
    base = work / "base.db"
    seed_store(base)
    out = []
    for name, fn in sorted(DAMAGE.items()):
        path = work / f"{name}.db"
        shutil.copy(base, path)
        fn(path)
        before = snapshot(path)
        row = {"damage": name}
        for action, call in (("write", lambda: Population(path).close()),
                             ("read", lambda: _read_all(path)),
                             ("check", lambda: check_store(path)),
                             ("proofstore", lambda: ProofStore(path).close())):
            try:
                res = call()
                row[action] = "ok" if res is None or getattr(res, "ok", True) else "reported"
            except FormloopError as exc:
                row[action] = type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - a traceback is what this counts
                row[action] = f"TRACEBACK {type(exc).__name__}"
        row["unchanged"] = snapshot(path)[0] == before[0]
        out.append(row)
    return out


def _read_all(path: Path) -> None:
    with Population(path, mode="read") as p:
        p.templates(), p.designs(), p.measurements()


def kill_rounds(work: Path, kills: int, together: bool, seed: int) -> dict:
    path = work / f"kill-{int(together)}.db"
    seed_store(path, designs=0)
    rng, committed = random.Random(seed), 0
    for k in range(kills):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(k * 1_000_000), str(int(together))],
                                stdout=subprocess.PIPE, text=True, env=ENV)
        target = rng.randint(5, 200)
        for _ in range(target):
            proc.stdout.readline()
        time.sleep(rng.random() * 0.01)  # land the kill anywhere in a transaction or between two
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        committed += target
    rep = check_store(path)
    return {"path": "one transaction" if together else "two transactions", "kills": kills,
            "designs_reported_committed": committed, "designs": rep.counts["designs"],
            "measurements": rep.counts["measurements"], "designs_without_measurements": rep.unmeasured_designs,
            "integrity_ok": rep.ok and not rep.check_findings}


def cold_store(work: Path, processes: int, claim: bool) -> dict:
    d = work / f"cold-{int(claim)}"
    d.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", PROVER, str(d / "p.db"), str(d / "go"), str(d / "log"),
                               str(int(claim))], env=ENV) for _ in range(processes)]
    while len(list(d.glob("go.ready-*"))) < processes:
        time.sleep(0.01)
    (d / "go").touch()
    codes = [p.wait() for p in procs]
    with Population(d / "p.db", mode="read") as p:
        certs = len(p.certificates(GEMM.content_hash))
    return {"claims": claim, "processes": processes, "exit_codes": codes,
            "proof_attempts": len((d / "log").read_text().split()), "certificates": certs}


def open_cost(work: Path, rows: int) -> dict:
    path = work / "big.db"
    seed_store(path, designs=0)
    with Population(path) as p:
        p.conn.execute("BEGIN")  # one transaction for the bulk fill: this measures opening, not writing
        for i in range(rows):
            d = p._insert_design(p.conn, GEMM.content_hash, f"gemm fp32 M={i + 1} N=1 K=1", CHIP, json.dumps({"i": i}),
                                 1.0, "us", "milp", None, None)
            p._insert_measurement(p.conn, d, f"gemm fp32 M={i + 1} N=1 K=1", CHIP,
                                  MeasurementFact("model", "cpu", 1e-6, provenance={"device": "cpu", "pad": "x" * 200}))
        p.conn.execute("COMMIT")
    out = {"rows": rows, "bytes": path.stat().st_size}
    for mode in ("write", "read"):
        times = []
        for _ in range(5):
            t = time.perf_counter()
            Population(path, mode=mode).close()
            times.append(time.perf_counter() - t)
        out[f"open_{mode}_ms_median"] = sorted(times)[2] * 1e3
    t = time.perf_counter()
    rep = check_store(path)
    out["check_full_ms"] = (time.perf_counter() - t) * 1e3
    out["check_ok"] = rep.ok
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--processes", type=int, default=6)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="store-faults-"))
    try:
        res = {"damage": damage_matrix(work),
               "kill9": [kill_rounds(work, args.kills, together, seed=12) for together in (True, False)],
               "cold_store": [cold_store(work, args.processes, claim) for claim in (True, False)],
               "open_cost": open_cost(work, args.rows)}
    finally:
        shutil.rmtree(work)
    (args.out / "store_faults.json").write_text(json.dumps(res, indent=1))
    print("damage        write           read            check     proofstore      file unchanged")
    for r in res["damage"]:
        print(f"{r['damage']:<14} {r['write']:<15} {r['read']:<15} {r['check']:<9} {r['proofstore']:<15} "
              f"{r['unchanged']}")
    print("kill -9 (path, kills, designs committed>=reported, designs without measurements, integrity ok)")
    for r in res["kill9"]:
        print(f"  {r['path']:<17} {r['kills']:>3} {r['designs']:>6} >= {r['designs_reported_committed']:<6} "
              f"{r['designs_without_measurements']:>4} {r['integrity_ok']}")
    for r in res["cold_store"]:
        print(f"cold store, {r['processes']} processes, claims={r['claims']}: {r['proof_attempts']} proof attempts, "
              f"{r['certificates']} certificates")
    o = res["open_cost"]
    print(f"open {o['rows']} designs + measurements ({o['bytes'] / 2**20:.1f} MiB): write (quick_check) "
          f"{o['open_write_ms_median']:.1f} ms, read {o['open_read_ms_median']:.1f} ms, full check "
          f"{o['check_full_ms']:.1f} ms (CPU wall time)")


if __name__ == "__main__":
    main()
