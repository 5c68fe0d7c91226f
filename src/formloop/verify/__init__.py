"""formloop.verify: prove a template once (K1, K3, its index and schedule obligations), check each
candidate cheaply, and replay every counterexample with an independent interpreter.

Outcomes are three: proved, counterexample (witness, trace, replay), unresolved. This package and
`formloop.expr.to_z3` are the only importers of z3; `toolchain()` names the solver for others."""
from formloop.verify.certificate import (
    Certificate, ProofPlan, ProofRun, Recheck, overall, plan_of, prove_template,
)
from formloop.verify.events import Schedule, check_schedule, check_schedule_obligation
from formloop.verify.index import IndexAxis, check_bijection, check_index, check_partition
from formloop.verify.instance import InstanceCheck, check_instance
from formloop.verify.lowering import ParamScope, proof_scope
from formloop.verify.outcome import ObligationResult, Verdict, toolchain, verdict_of_validity
from formloop.verify.smt import admitted, check_claim, check_k1, check_k3
from formloop.verify.solver import Replay

__all__ = [
    "Certificate", "IndexAxis", "InstanceCheck", "ObligationResult", "ParamScope", "ProofPlan", "ProofRun",
    "Recheck", "Replay", "Schedule", "Verdict", "admitted", "check_bijection", "check_claim", "check_index",
    "check_instance", "check_k1", "check_k3", "check_partition", "check_schedule", "check_schedule_obligation",
    "overall", "plan_of", "proof_scope", "prove_template", "toolchain", "verdict_of_validity",
]
