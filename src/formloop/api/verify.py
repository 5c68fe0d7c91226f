"""Proofs as user actions: prove a template's family (a certificate), check one fault, schedule or
design against the obligations, re-run a certificate, and prove the five-step GEMM chain.

Every obligation comes back with its verdict, its time (s, z3 + replay) and, when refuted, its
witness, trace and replay; a slot schedule's counterexample also carries the schedule its trace
replays under (`details.schedule`), which is what the CLI draws as a timeline."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from formloop.api.resolve import template_from
from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.library import get_template
from formloop.library import gemm_tiling_program as tiling_program
from formloop.library.chain.compose import CHAINS, STEPS, ChainConfig, parse_fault, with_fault
from formloop.library.chain.compose import prove_chain as prove_chain_steps
from formloop.verify import Certificate, ObligationResult, prove_template as verify_template
from formloop.verify.proofgraph import MODES
from formloop.verify.proofstore import ProofStore
from formloop.verify.replay import replay_trace
from formloop.workload import GEMM_AXES, as_integer, parse_shape, parse_sizes, split_shape

TILING = "gemm-tiling"
DESIGN_AXES = ("Tm", "Tn", "Tk", "S", "P", "beta")
SCHEDULE_AXES = ("S", "P", "beta")


def obligation_json(r: ObligationResult) -> dict:
    """One obligation as data (its query text is long; it stays in certificates). A slot schedule's
    counterexample also carries `replay_notes`: what the independent interpreter found at each event
    of its trace (empty where nothing went wrong), which the CLI draws as a timeline."""
    d = r.as_dict()
    d.pop("query", None)
    sched = (r.details or {}).get("schedule")
    if r.trace and sched:
        replay = replay_trace(r.trace, S=sched["S"], P=sched["P"], beta=sched["beta"], warps=sched["warps"],
                              phases=sched["phases"], leading=sched["leading"])
        d["replay_notes"] = list(replay.notes)
    return d


def prove_template(template: str, options: Mapping[str, Any] | None = None, *, dtype: str | None = None,
                   timeout_s: float = 10.0, out: str | None = None) -> dict:
    """Prove a template once for its family: K1, K3 and its index and schedule obligations; write
    the certificate (JSON) to `out` when given. Nothing is stored (admission is `admit_template`).
    `dtype` is the template's dtype option when it has one and `options` do not set it."""
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not timeout_s > 0:
        raise InvalidInput("timeout", timeout_s, "a positive number of seconds")
    t = template_from(template, options, dtype).template
    cert = verify_template(t, timeout_s=timeout_s)
    if out is not None:
        Path(out).write_text(cert.to_json())
    return plain({"template": t.name, "options": dict(t.options), "hash": cert.template_hash,
                  "verdict": cert.verdict, "obligations": [obligation_json(r) for r in cert.obligations],
                  "seconds": cert.seconds, "solver": cert.solver, "fixed": dict(cert.fixed),
                  "fixed_reason": cert.fixed_reason, "certificate": out, "units": {"seconds": "s (wall)"}})


def _tiling_program(template: str | None):
    if template != TILING:
        if template is not None:
            get_template(template)  # unknown names fail here with the list of known ones
        raise InvalidInput("template", template, [TILING], fix="faults and schedules are defined for gemm-tiling only")
    return tiling_program


def _small_ints(text: str, names: Sequence[str], what: str) -> dict[str, int]:
    """'2,1,0' or 'S=2,P=1,beta=0' (the shape grammar): every one of `names`, each a whole number >= 0."""
    raw = split_shape(text, names, what=what)
    values = {k: as_integer(raw.get(k, "")) for k in names}
    if set(raw) != set(names) or any(v is None or v < 0 for v in values.values()):
        raise InvalidInput(what, text, f"{len(names)} non-negative integers separated by commas ({','.join(names)})")
    return values


def verify(template: str | None = TILING, *, fault: str | None = None, schedule: str | None = None,
           design: str | None = None, recheck: str | None = None, shape: str = "1000,1000,1000", warps: int = 2,
           phases: int = 5, timeout_s: float = 10.0) -> dict:
    """Exactly one of: a named fault injected into the proved 1000^3 design, one slot schedule
    S,P,BETA, or one design Tm,Tn,Tk,S,P,BETA at `shape`, checked against the template's
    obligations (`obligations`); or a certificate file re-run (`recheck`'s answer)."""
    given = (("--fault", fault), ("--schedule", schedule), ("--design", design), ("--recheck", recheck))
    chosen = [n for n, v in given if v is not None]
    if len(chosen) != 1:
        raise InvalidInput("mode", " ".join(chosen) or "none", ["--fault NAME", "--schedule S,P,BETA",
                                                                 "--design Tm,Tn,Tk,S,P,BETA", "--recheck CERT.json"],
                           fix="give exactly one")
    if recheck is not None:
        return {**recheck_certificate(recheck, timeout_s=timeout_s), "mode": "recheck"}
    prog = _tiling_program(template)
    if fault is not None:
        if fault not in prog.FAULTS:
            raise InvalidInput("fault", fault, sorted(prog.FAULTS))
        results = prog.check_fault(fault, warps=warps, phases=phases, timeout_s=timeout_s)
        what, expect = prog.FAULTS[fault]
        title = f"verify {template} · fault {fault}: {what} · expected to fail: {', '.join(expect)}"
    elif schedule is not None:
        s = _small_ints(schedule, SCHEDULE_AXES, "schedule")
        results = prog.verify_schedule(s["S"], s["P"], s["beta"], warps=warps, phases=phases, timeout_s=timeout_s)
        title = (f"verify {template} · schedule S={s['S']}, P={s['P']}, beta={s['beta']} · "
                 f"{warps} warps × {phases} phases")
    else:
        assignment = _small_ints(design, DESIGN_AXES, "design")
        dims = tuple(parse_shape(shape, GEMM_AXES).values())
        results = prog.check_design(assignment, dims, warps=warps, phases=phases, timeout_s=timeout_s)
        title = f"verify {template} · design {tuple(assignment.values())} · shape {dims}"
    return plain({"mode": chosen[0].lstrip("-"), "template": template, "title": title,
                  "obligations": [obligation_json(r) for r in results],
                  "units": {"obligations[].seconds": "s (z3 + replay)"}})


def recheck_certificate(certificate: str, *, timeout_s: float = 10.0) -> dict:
    """Re-run the proof behind a certificate file and say whether the verdict still stands."""
    path = Path(certificate)
    if not path.is_file():
        raise InvalidInput("--recheck", str(certificate), "a certificate file written by `formloop prove --out`")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("--recheck", str(certificate), f"a UTF-8 certificate file (byte {exc.start} is not "
                           "UTF-8)") from None
    old = Certificate.from_json(text)
    result = old.recheck(get_template(old.template, **dict(old.options)), timeout_s=timeout_s)
    return plain({"agrees": result.agrees, "changes": list(result.changes), "old_verdict": old.verdict,
                  "new_verdict": result.new.verdict, "template": old.template,
                  "template_hash": result.new.template_hash, "obligations": len(old.obligations),
                  "seconds": result.new.seconds, "certificate": str(path)})


def prove_chain(chain: str = "gemm", *, depth: int = 5, mode: str = "full", fault: str | None = None,
                shapes: str | Sequence[int] = "3,4", store: str | None = None) -> dict:
    """Prove the GEMM refinement chain step by step (bounded models of sizes `shapes`) and compose the
    local proofs; `mode` node/query reuses unchanged proofs from the proof store."""
    if chain not in CHAINS:
        raise InvalidInput("chain", chain, CHAINS)
    if mode not in MODES:
        raise InvalidInput("mode", mode, MODES)
    if fault is not None:
        parse_fault(fault)
    sizes = parse_sizes(shapes, field="shapes") if isinstance(shapes, str) else tuple(shapes)
    config = with_fault(ChainConfig(depth=depth, shapes=sizes), fault)
    with ProofStore(Path(store) if store else None) as st:
        return plain(prove_chain_steps(config, mode=mode, store=st).as_dict())


def chain_faults() -> dict:
    """The faults `prove_chain` can inject, as STEP:NAME with the condition that catches each."""
    return plain({"faults": [{"fault": f"{k}:{f.name}", "step": k, "step_name": step.name, "doc": f.doc,
                              "caught_by": f.caught_by} for k, step in STEPS.items() for f in step.faults.values()]})
