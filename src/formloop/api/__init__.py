"""The service layer: one function per user action, shared by the CLI and the MCP server.

Every function takes plain values (names, shape text or mappings, numbers, paths as strings) and
returns a plain, strict-JSON dict whose numbers say their unit and source; a face only parses its
arguments and renders the dict. Errors are `formloop.errors` types naming the field and what is
allowed. Store-backed actions take `settings` (store path, tier, time limits; default: the
environment's).

    templates   list_templates, show_template
    proofs      prove_template (a certificate), admit_template / add_template (prove and store),
                verify (fault | schedule | design | recheck), recheck_certificate, prove_chain, chain_faults
    solving     solve, check            (gemm-tiling on h200/h100 routes to the GPU contract; the
                                         attention templates take B,Hq,Hkv,D,L and default to bf16 on h200)
    measuring   evaluate, measure, sol_report, sol_ops
    kernel specs dsl_check, dsl_emit, dsl_run  (the spec language: validate, emit Triton, run vs torch)
    models      layer  (a whole Qwen3 decoder layer per scenario: fusion MILP, parts, measured on a GPU)
    co-design   wall_relax, codesign_study
    population  population_query, population_check, population_backup, population_export
    the loop    run
    campaigns   harness, integrity, schedule, campaign, synth_log
    optimizing  optimize, optimize_status, optimize_submit (problem files to verified ModelNew kernels)
"""
from formloop.api.admission import add_template, admit_template
from formloop.api.campaign import campaign, harness, integrity, schedule, synth_log
from formloop.api.codesign import codesign_study, wall_relax
from formloop.api.dsl import dsl_check, dsl_emit, dsl_run
from formloop.api.layer import layer
from formloop.api.loop import run
from formloop.api.measure import evaluate, measure
from formloop.api.optimize import optimize, optimize_status, optimize_submit
from formloop.api.reuse import template_reuse
from formloop.api.population import population_backup, population_check, population_export, population_query
from formloop.api.sol import sol_ops, sol_report
from formloop.api.solve import check, solve
from formloop.api.templates import list_templates, show_template
from formloop.api.verify import chain_faults, prove_chain, prove_template, recheck_certificate, verify

__all__ = [
    "add_template", "admit_template", "campaign", "chain_faults", "check", "codesign_study", "dsl_check", "dsl_emit",
    "dsl_run", "evaluate", "harness",
    "integrity", "layer", "list_templates", "measure", "optimize", "optimize_status", "optimize_submit",
    "population_backup", "population_check", "population_export", "population_query", "prove_chain", "prove_template",
    "recheck_certificate", "run", "schedule", "show_template", "sol_ops", "sol_report", "solve", "synth_log", "verify",
    "wall_relax",
    "template_reuse",
]
