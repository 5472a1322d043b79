"""jitprof: an eBPF sampling profiler for native and JIT-compiled code."""

__version__ = "0.1.0"
