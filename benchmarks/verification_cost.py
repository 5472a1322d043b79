"""What the kernel's verifier does with each program at every start: the
instructions it walks (the same on every CPU of one kernel: a change to a
program's shape shows here first) and the time it takes (the CPU's own),
for the programs a node run loads and those loaded when a process needs
them."""

from __future__ import annotations

import ctypes
import os
import re
import statistics
from dataclasses import dataclass

from profiler.cli import parse_options
from profiler.kernel import bpf_calls, bpf_object, bpf_program, preflight
from profiler.run.program_loading import load_options

LOG_STATS = 4  # the verifier's statistics only: its time, the instructions it walked
ROUNDS = 5
MIN_INSTRUCTIONS = 500  # smaller programs verify in a few milliseconds
# Loaded when a process needs them (a JVM, a node with async context frames), not at every start.
LATER = ("walk_jvm_stack", "read_sample_context")


@dataclass(frozen=True)
class Verified:
    name: str
    instructions: int  # in the program
    walked: int  # the verifier's "processed" instructions
    seconds: float  # median of ROUNDS


def verification_cost() -> list[str]:
    lines = [
        "## The verifier at every start",
        "",
        f"Each program of a node run's BPF object (and of an `--off-cpu` run's walkers) loaded alone, {ROUNDS} times,",
        "with the verifier's statistics (`BPF_LOG_STATS`): the instructions it walked (one kernel walks the same",
        "on any CPU) and its own time, median. The programs are verified side by side on the CPUs while",
        "jitprof imports the rest; the walker is the longest.",
        "",
        "| program | instructions | walked by the verifier | verified in (ms) | loaded |",
        "| --- | --- | --- | --- | --- |",
    ]
    for off_cpu in (False, True):
        arguments = ["--off-cpu"] if off_cpu else []
        options = load_options(parse_options([*arguments, "--", "node"]))
        for verified in _verify_all(bpf_program.compile_flags(options), off_cpu):
            when = "when a process needs it" if verified.name.startswith(LATER) else "at start"
            lines.append(
                f"| {verified.name} | {verified.instructions:,} | {verified.walked:,} | {verified.seconds * 1000:.1f} | {when} |"
            )
    lines.append("")
    return lines


def _verify_all(cflags: list[str], off_cpu: bool) -> list[Verified]:
    key = bpf_object.object_key(bpf_program.bpf_source(), cflags)
    spec = bpf_object.load_cached(key)
    if spec is None:
        spec = bpf_program.compile_object(preflight.import_bcc(), cflags)
    maps_only = bpf_object.load(spec, later=lambda _name: True)  # the maps the programs refer to
    try:
        programs = [
            program for program in spec.programs if not off_cpu or program.name.endswith("_off_cpu") and "stack" in program.name
        ]
        return [
            _verify(spec, program, maps_only.map_fds)
            for program in programs
            if len(program.instructions) >= bpf_object.INSTRUCTION.size * MIN_INSTRUCTIONS
        ]
    finally:
        maps_only.close()


def _verify(spec: bpf_object.BpfObject, program: bpf_object.ProgramSpec, map_fds: dict[str, int]) -> Verified:
    code = bpf_object._program_code(program, map_fds)  # noqa: SLF001  (the loader's own relocation)
    walked = 0
    times = []
    for _round in range(ROUNDS):
        log = ctypes.create_string_buffer(1 << 16)
        descriptor = bpf_calls.load_program(
            program.program_type, program.name, code, spec.license, spec.kernel_version, log, log_level=LOG_STATS
        )
        if descriptor < 0:
            raise RuntimeError(f"the kernel refused {program.name}: {os.strerror(-descriptor)}")
        os.close(descriptor)
        text = log.value.decode("utf-8", "replace")
        processed = re.search(r"processed (\d+) insns", text)
        took = re.search(r"verification time (\d+) usec", text)
        if processed is None or took is None:
            raise RuntimeError(f"no verifier statistics for {program.name}: {text[-200:]!r}")
        walked = int(processed.group(1))
        times.append(int(took.group(1)) / 1e6)
    return Verified(program.name, len(program.instructions) // bpf_object.INSTRUCTION.size, walked, statistics.median(times))
