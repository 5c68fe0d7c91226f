"""Hardware–software co-design: co-design problems over a hardware library (`problem`), the
Ventus-like analytic evaluator (`ventus_model`), wall relaxation (`walls`), the baselines it is
compared with (`baselines`), study files (`study`) and their tables and figure (`tables`)."""
