"""The five-step GEMM refinement chain (seed 000 §2.3.2): reduction partition, physical storage,
asynchronous transfer, double buffering, shared resources — each a template with local obligations
(checked by `formloop.verify.local`) — and their composition (`compose.prove_chain`)."""
