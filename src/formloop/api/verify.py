"""Proofs as user actions: prove a template's family (a certificate), check one fault, schedule or
design against the obligations, re-run a certificate, and prove the five-step GEMM chain.

Every obligation comes back with its verdict, its time (s, z3 + replay) and, when refuted, its
witness, trace and replay; a slot schedule's counterexample also carries the schedule its trace
replays under (`details.schedule`), which is what the CLI draws as a timeline."""
from __future__ import annotations

import hashlib
import json
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
from formloop.verify.certificate import FORMAT as CERT_FORMAT
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


CERT_FIELDS = ("format", "template", "template_hash", "options", "verdict", "counts", "obligations")
OBLIGATION_FIELDS = ("obligation", "verdict", "query")


def recheck_certificate(certificate: str, *, timeout_s: float = 10.0) -> dict:
    """Re-run the proof behind a certificate file and say whether the verdict still stands. Any
    difference, including an edit to the file itself (a recorded verdict or count that its
    obligations do not give, a query whose hash does not match, a missing field), is a change that
    names the field; `agrees` is true only when there is none."""
    path = Path(certificate)
    if not path.is_file():
        raise InvalidInput("--recheck", str(certificate), "a certificate file written by `formloop prove --out`")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("--recheck", str(certificate), f"a UTF-8 certificate file (byte {exc.start} is not "
                           "UTF-8)") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raw = None
    if not isinstance(raw, dict) or raw.get("format") != CERT_FORMAT:
        Certificate.from_json(text)  # names what the file is not (JSON, or a certificate's format)
        raise InvalidInput("certificate format", None, [CERT_FORMAT])
    changes = _tampered(raw)
    base = {"template": raw.get("template"), "certificate": str(path), "old_verdict": raw.get("verdict"),
            "obligations": len(raw["obligations"]) if isinstance(raw.get("obligations"), list) else 0}
    try:
        old = Certificate.from_json(text)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if not changes:
            changes.append(f"field {exc}: unreadable ({type(exc).__name__})")
        return plain({**base, "agrees": False, "changes": sorted(changes), "new_verdict": None,
                      "template_hash": raw.get("template_hash"), "seconds": 0.0})
    changes += _recorded_vs_obligations(raw, old)
    result = old.recheck(get_template(old.template, **dict(old.options)), timeout_s=timeout_s)
    changes += list(result.changes)
    if isinstance(raw.get("verdict"), str) and raw["verdict"] != result.new.verdict.value:
        changes.append(f"field verdict: recorded {raw['verdict']}, the recheck gives {result.new.verdict.value}")
    changes = sorted(set(changes))
    return plain({**base, "agrees": not changes, "changes": changes, "old_verdict": raw.get("verdict"),
                  "new_verdict": result.new.verdict.value, "template_hash": result.new.template_hash,
                  "seconds": result.new.seconds})


def _tampered(raw: dict) -> list[str]:
    """Fields a certificate must hold, missing or of the wrong kind."""
    out = [f"field {f}: missing" for f in CERT_FIELDS if f not in raw]
    for i, o in enumerate(raw.get("obligations") if isinstance(raw.get("obligations"), list) else []):
        if not isinstance(o, dict):
            out.append(f"field obligations[{i}]: not an object")
            continue
        out += [f"field obligations[{i}].{f}: missing" for f in OBLIGATION_FIELDS if f not in o]
    if "obligations" in raw and not isinstance(raw["obligations"], list):
        out.append("field obligations: not a list")
    return out


def _recorded_vs_obligations(raw: dict, cert: Certificate) -> list[str]:
    """What the file records against what its own obligations give (an edited verdict or count)."""
    out = []
    if "verdict" in raw and raw["verdict"] != cert.verdict.value:
        out.append(f"field verdict: recorded {raw['verdict']}, its obligations give {cert.verdict.value}")
    if "counts" in raw and raw["counts"] != cert.counts():
        out.append(f"field counts: recorded {raw['counts']}, its obligations give {cert.counts()}")
    for i, (o, r) in enumerate(zip(raw.get("obligations") or [], cert.obligations)):
        recorded = o.get("query_sha256") if isinstance(o, dict) else None
        if recorded is not None and recorded != hashlib.sha256(r.query.encode()).hexdigest()[:16]:
            out.append(f"field obligations[{i}].query_sha256: does not match its query ({r.obligation})")
    return out


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
