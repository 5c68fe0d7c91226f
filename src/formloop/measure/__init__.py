"""formloop.measure: the measuring side in one package.

    harness.evaluate(problem, candidate)      correctness on fresh inputs, timing, speedup, SOL fraction
    probes.check_integrity(problem, candidate) verdict clean | minor | torch-only | gaming, with evidence
    compare                                    output comparison with dtype- and magnitude-aware tolerances
    memory                                     poisoned allocations, settling, input snapshots
    integrity                                  verdicts, the SOL-ceiling check and the static scan

Modules import torch lazily, so importing the package needs no torch."""
