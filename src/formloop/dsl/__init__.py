"""formloop.dsl: the kernel spec language.

grammar (lark) -> lower (typed IR, per-field diagnostics) -> validate (rules between fields and the
template's walls on the target chip) -> bridge (gemm-epilogue-gpu instance: open fields solved by
its MILP, instance check with its certificate) -> emission (formloop.library.gemm_epilogue_emit)
-> program / run (correctness against torch, timing). `service` is the JSON-level entry point
the CLI (`formloop dsl`) and the MCP tools call. docs/dsl.md describes the language."""
