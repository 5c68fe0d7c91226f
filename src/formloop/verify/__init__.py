"""formloop.verify: prove a template once (K1, K3, its index and schedule obligations), check each
candidate cheaply, and replay every counterexample with an independent interpreter.

Outcomes are three: proved, counterexample (witness, trace, replay), unresolved."""
from formloop.verify.certificate import Certificate, ProofPlan, Recheck, overall, plan_of, prove_template
from formloop.verify.events import Schedule, check_schedule, check_schedule_obligation
from formloop.verify.instance import InstanceCheck, check_instance
from formloop.verify.outcome import ObligationResult, Verdict, verdict_of_validity
from formloop.verify.smt import IndexAxis, check_index, check_k1, check_k3

__all__ = [
    "Certificate", "IndexAxis", "InstanceCheck", "ObligationResult", "ProofPlan", "Recheck", "Schedule", "Verdict",
    "check_index", "check_instance", "check_k1", "check_k3", "check_schedule", "check_schedule_obligation",
    "overall", "plan_of", "prove_template", "verdict_of_validity",
]
