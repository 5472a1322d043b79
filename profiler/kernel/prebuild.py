"""`python -m profiler.kernel.prebuild [--default-only]`: compile the
sampler's variants with BCC at set-up and keep them beside the install, so
that even a first run with an empty cache loads them in milliseconds instead
of compiling. `make demo`'s set-up compiles only the default variant (a
few seconds each); the tests' set-up compiles them all."""

from __future__ import annotations

import sys

from profiler.errors import JitprofError
from profiler.kernel import bpf_object, preflight
from profiler.kernel.bpf_program import LoadOptions, bpf_source, compile_flags, compile_object


def main(argv: list[str]) -> int:
    default_only = argv == ["--default-only"]
    bcc = preflight.import_bcc()
    source = bpf_source()
    bpf_object.make_installed_dir()
    built = 0
    current = set()
    variants = [(kernel_stacks, dwarf, False) for kernel_stacks in (False, True) for dwarf in (True, False)]
    variants += [(kernel_stacks, True, True) for kernel_stacks in (False, True)]  # --off-cpu
    if default_only:
        variants = variants[:1]
    for kernel_stacks, dwarf, off_cpu in variants:
        try:
            cflags = compile_flags(LoadOptions(99, kernel_stacks, dwarf, off_cpu))
        except JitprofError as error:  # no BTF: --off-cpu says so when asked
            print(f"setup: note: {error.message}", file=sys.stderr)
            continue
        key = bpf_object.object_key(source, cflags)
        path = bpf_object.installed_path(key)
        if path is None:
            continue
        current.add(path.name)
        if path.exists():
            continue
        bpf_object.store_installed(key, compile_object(bcc, cflags))
        built += 1
    # Objects of an earlier sampler source are never loaded again.
    for stale in bpf_object.INSTALLED_DIR.glob("*.json"):
        if current and not default_only and stale.name not in current:
            stale.unlink(missing_ok=True)
    if built:
        print(f"setup: compiled {built} variants of the BPF sampler", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
