"""formloop.measure: the measuring side in one package.

    timer      time_launches / time_calls: CUDA graph over rotating operand sets, eager per call,
               or host wall time (labelled cpu); clocks and power beside every GPU number
    device     clock, power and temperature readings (NVML or nvidia-smi); device facts
    compare    the one output checker: formloop's magnitude-aware rule, KernelBench's allclose and
               the evaluator's norm bound, computed where the tensors live, in blocks
    truth      the float64 truth of a reference, whole or in row blocks on the device
    mathmode   the reference's math mode: fp32 with TF32 off for correctness, PyTorch's defaults for timing
    memory     poisoned allocations, settling, input snapshots
    session    loading a problem and a candidate; input sets on the device; poisoned calls
    harness    evaluate(problem, candidate): correctness, timing, timed-output and after-timing
               checks, speedup, SOL fraction (with a warning beyond speed of light)
    integrity  verdicts (clean | minor | probe-failed | torch-only | gaming | crashed | timed-out |
               exited) and the SOL-ceiling check
    static     the source scan; launches: the runtime kernel recorder (torch-only at run time)
    probes     check_integrity(problem, candidate) over probes_calls and probes_inputs
    sandbox    run_in_child: untrusted code in a child process with time and memory limits
    child_setup  what such a child sets before the untrusted code runs and reports beyond its stages
               (Triton compiles, Inductor cache hits and misses)
    jobs       run_harness / run_integrity: the harness and the battery, sandboxed (what the CLI runs)

Modules import torch at module level; importing the package itself needs no torch."""
