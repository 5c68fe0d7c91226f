"""Hardware–software co-design: co-design problems over a hardware library (`problem`: program menus
over the Ventus-like analytic evaluator, `ventus_model`; `template_problem`: a library template whose
walls are chip parameters), wall relaxation (`walls`) with certificates that follow the chip
(`chip_proofs`), the baselines it is compared with (`baselines`), study files (`study`) and their
tables and figure (`tables`)."""
