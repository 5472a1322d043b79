"""jitprof: an eBPF sampling profiler for native and JIT-compiled code."""

__version__ = "0.1.0"

# Before any record class is made (profiler/native/dataclass_code.py).
from profiler.native import dataclass_code as _dataclass_code  # noqa: E402

_dataclass_code.install()
