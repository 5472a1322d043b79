"""`make fuzz`: what targets feed the symbolising path, mutated.

Seeds are real files: a -g C program (DWARF 4 and 5, and compressed),
node's own binary cut to the sections jitprof reads (symbols, unwind
tables, notes) and a Go program's .gopclntab. Each mutant changes a few
bytes, integers or header fields of one section, and is fed to:

- blazesym in its confined helper (the limits jitprof runs it under): a
  helper that dies or overruns its deadline is contained, and counted;
- jitprof's own readers (symbols, linkage, build-id, function starts,
  .gopclntab), in a forked child per mutant so that a crash, an exception
  they do not declare, or a hang (HANG_S) is caught and kept;
- the unwind table compiler under AddressSanitizer (native/build/fuzz_unwind).

A finding is written to FINDINGS (tests/data/fuzz/); the unit test
tests/native/test_fuzz_findings.py replays every file kept there.

    python -m tests.fuzz_symbolizing [--runs 3000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "tests" / "data" / "fuzz"
UNWIND_FUZZER = ROOT / "native" / "build" / "fuzz_unwind"
HANG_S = 5.0
NODE_SECTIONS = (".note.gnu.build-id", ".dynsym", ".dynstr", ".gnu.hash", ".symtab", ".strtab", ".eh_frame_hdr", ".eh_frame")
INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, (1 << 63) - 1, (1 << 64) - 1)


@dataclass
class Section:
    name: str
    offset: int
    size: int
    header_at: int  # where its Elf64_Shdr is


@dataclass
class Seed:
    label: str
    data: bytes
    sections: list[Section]
    addresses: list[int]  # file addresses worth naming: some functions' starts and middles
    weights: dict[str, int]  # which sections to mutate, how often


def sections_of(data: bytes) -> list[Section]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + index * entry_size) for index in range(count)]
    names_offset = headers[names_index][4]
    found = []
    for index, header in enumerate(headers):
        name_at = names_offset + header[0]
        name = data[name_at : data.index(b"\0", name_at)].decode()
        found.append(Section(name, header[4], header[5] if header[1] != 8 else 0, shoff + index * entry_size))  # NOBITS: no bytes
    return found


def function_addresses(path: Path, limit: int = 64) -> list[int]:
    listing = subprocess.run(["nm", "-S", "--defined-only", str(path)], capture_output=True, text=True, check=True)
    found = []
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "Tt" and int(fields[1], 16) > 8:
            start = int(fields[0], 16)
            found += [start, start + int(fields[1], 16) // 2]
    random.Random(0).shuffle(found)
    return sorted(found[:limit])


def make_seeds(directory: Path) -> list[Seed]:
    from tests.hostile_elf import HOT_SOURCE, build  # noqa: PLC0415

    seeds = []
    debug_weights = {".debug_info": 6, ".debug_abbrev": 3, ".debug_line": 5, ".debug_str": 1, ".debug_line_str": 2,
                     ".debug_rnglists": 2, ".debug_aranges": 2, ".debug_loclists": 1, ".symtab": 2, ".strtab": 1,
                     ".eh_frame": 2, ".eh_frame_hdr": 1, ".note.gnu.build-id": 1, ".gnu_debuglink": 1}  # fmt: skip
    for label, flags in (("c-dwarf4", ["-g", "-gdwarf-4"]), ("c-dwarf5", ["-g", "-gdwarf-5"]), ("c-zlib", ["-g", "-gz=zlib"])):
        binary = build(directory, label, *flags, "-O2", source=HOT_SOURCE)
        data = binary.read_bytes()
        seeds.append(Seed(label, data, sections_of(data), function_addresses(binary), debug_weights))
    node = Path(shutil.which("node") or "/usr/bin/node").resolve()
    cut = directory / "node-sections"
    kept = [name for name in NODE_SECTIONS if any(section.name == name for section in sections_of(node.read_bytes()))]
    subprocess.run(
        ["objcopy", *[f"--only-section={name}" for name in kept], str(node), str(cut)], check=True, capture_output=True
    )
    data = cut.read_bytes()
    seeds.append(Seed("node", data, sections_of(data), function_addresses(cut), {name: 1 for name in kept}))
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if Path(go).exists():
        environment = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(directory),
            "GOCACHE": str(directory / "gocache"),
            "GOFLAGS": "-mod=mod",
        }
        binary = directory / "gowork"
        subprocess.run([go, "build", "-ldflags=-s -w", "-o", str(binary), str(ROOT / "fixtures" / "gowork.go")],
                       check=True, env=environment, cwd=directory)  # fmt: skip
        data = binary.read_bytes()
        addresses = _go_addresses(binary)
        seeds.append(Seed("go", data, sections_of(data), addresses, {".gopclntab": 8, ".go.buildinfo": 1, ".note.go.buildid": 1}))
    return seeds


def _go_addresses(binary: Path) -> list[int]:
    from profiler.native.gopclntab import read_go_functions  # noqa: PLC0415

    with binary.open("rb") as handle:
        functions = read_go_functions(handle)
    assert functions is not None
    starts = list(functions.starts)
    return sorted(random.Random(0).sample(starts, min(32, len(starts))))


def mutate(seed: Seed, chooser: random.Random) -> tuple[bytes, str]:
    """A few changes to one section's bytes, or to its header; what was done."""
    data = bytearray(seed.data)
    present = [section for section in seed.sections if section.name in seed.weights and section.size > 0]
    section = chooser.choices(present, [seed.weights[section.name] for section in present])[0]
    if chooser.random() < 0.1:  # its header: where it is, how long, what it links to
        field, width = chooser.choice([(24, 8), (32, 8), (40, 4), (8, 8), (56, 8)])
        value = chooser.choice(INTERESTING + (section.size * 2, section.offset + 1, len(data)))
        data[section.header_at + field : section.header_at + field + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(
            width, "little"
        )
        return bytes(data), f"{section.name} header +{field}"
    changes = []
    for _change in range(chooser.randint(1, 8)):
        at = section.offset + chooser.randrange(section.size)
        kind = chooser.random()
        if kind < 0.4:
            data[at] ^= 1 << chooser.randrange(8)
        elif kind < 0.7:
            data[at] = chooser.randrange(256)
        else:
            width = chooser.choice([1, 2, 4, 8])
            end = min(at + width, section.offset + section.size)
            value = chooser.choice(INTERESTING) & ((1 << (8 * (end - at))) - 1)
            data[at:end] = value.to_bytes(end - at, "little")
        changes.append(at - section.offset)
    return bytes(data), f"{section.name} at {changes}"


# --- jitprof's own readers, in a child per mutant -------------------------------


def read_in_process(path: Path, addresses: list[int]) -> None:
    """What the symbolizer reads from a file itself; a declared error is fine."""
    from profiler.native import elf  # noqa: PLC0415
    from profiler.native.elf import PARSE_ERRORS, UnreadableElf  # noqa: PLC0415

    try:
        image = elf.open_elf([str(path)], str(path))
    except UnreadableElf:
        return
    try:
        symbols = image.symbols()
        linkage = image.linkage()
        go_functions = image.go_functions()
        for address in addresses:
            symbols.lookup(address)
            linkage.lookup(address)
            image.function_start(address)
            if go_functions is not None:
                located = go_functions.locate(address)
                if located is not None:
                    go_functions.function_line(located.start)
    except PARSE_ERRORS:
        return
    finally:
        image.close()


def run_in_child(path: Path, addresses: list[int]) -> str:
    """ "" when the readers were fine; else what went wrong."""
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reading)
        status = 0
        try:
            read_in_process(path, addresses)
        except BaseException as error:  # noqa: BLE001  (any undeclared error is a finding)
            os.write(writing, f"{type(error).__name__}: {error}"[:400].encode())
            status = 1
        os._exit(status)
    os.close(writing)
    deadline = time.monotonic() + HANG_S
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os.close(reading)
            return f"hang: over {HANG_S} s"
        time.sleep(0.002)
    message = os.read(reading, 1024).decode(errors="replace")
    os.close(reading)
    if os.WIFSIGNALED(status):
        return f"crash: {signal.Signals(os.WTERMSIG(status)).name}"
    return f"error: {message}" if os.WEXITSTATUS(status) else ""


def keep(mutant: Path, name: str) -> Path:
    """A finding, kept for tests/native/test_fuzz_findings.py to replay."""
    FINDINGS.mkdir(parents=True, exist_ok=True)
    kept = FINDINGS / f"{name}.elf"
    shutil.copy(mutant, kept)
    return kept.relative_to(ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitprof-fuzz-") as scratch:
        os.environ["JITPROF_CACHE_DIR"] = str(Path(scratch) / "cache")  # symbols read from mutants are not kept
        return fuzz(arguments, Path(scratch))


def fuzz(arguments: argparse.Namespace, directory: Path) -> int:
    from profiler.native.locator_process import CodeLocator, LocatorFailed  # noqa: PLC0415

    chooser = random.Random(arguments.seed)
    outcomes: Counter[str] = Counter()
    findings: list[str] = []
    started = time.monotonic()
    seeds = make_seeds(directory)
    locator = CodeLocator()
    unwind_inputs: list[Path] = []
    kinds_kept: set[tuple[str, str]] = set()  # one input per way blazesym's helper failed, per seed
    seconds: Counter[str] = Counter()
    try:
        for run in range(arguments.runs):
            seed = seeds[run % len(seeds)]
            began = time.monotonic()
            data, change = mutate(seed, chooser)
            mutant = directory / f"mutant-{run}"
            mutant.write_bytes(data)
            with mutant.open("rb") as handle:
                try:
                    locator.locate(handle, seed.addresses, str(mutant))
                    outcomes["blazesym named it"] += 1
                except LocatorFailed as failure:
                    contained = str(mutant) in locator.failures
                    outcomes["blazesym's helper failed (contained)" if contained else "blazesym refused it"] += 1
                    if contained:
                        how = str(failure).split(": ", 1)[-1]
                        kind = next((word for word in ("SIGSEGV", "SIGABRT", "SIGBUS", "deadline") if word in how), "other")
                        kept = (
                            keep(mutant, f"blazesym-{kind}-{seed.label}-{arguments.seed}-{run}")
                            if kind not in kinds_kept
                            else None
                        )
                        kinds_kept.add(kind)
                        findings.append(f"{seed.label} #{run} ({change}): blazesym {how}" + (f"; kept as {kept}" if kept else ""))
                        locator.close()  # a fresh helper: its owner is root, so it is asked again
                        locator = CodeLocator()
            problem = run_in_child(mutant, seed.addresses)
            if problem:
                outcomes["jitprof's readers: " + problem.split(":")[0]] += 1
                kept = keep(mutant, f"readers-{seed.label}-{arguments.seed}-{run}")
                findings.append(f"{seed.label} #{run} ({change}): jitprof's readers {problem}; kept as {kept}")
            seconds[seed.label] += time.monotonic() - began
            if run % 10 == 0 and seed.label != "node":
                unwind_inputs.append(mutant)
            else:
                mutant.unlink()
    finally:
        locator.close()
    asan = subprocess.run([str(UNWIND_FUZZER), "0", *map(str, unwind_inputs)], capture_output=True, text=True, timeout=600)
    outcomes[f"unwind compiler under ASan: {'clean' if asan.returncode == 0 else 'FAILED'}"] += len(unwind_inputs)
    if asan.returncode != 0:
        findings.append(f"unwind compiler: {asan.stderr[-2000:]}")
    print(f"{arguments.runs} mutants of {len(seeds)} seeds in {time.monotonic() - started:.0f} s (seed {arguments.seed})")
    for outcome, count in sorted(outcomes.items()):
        print(f"  {count:6}  {outcome}")
    print("  seconds per seed: " + ", ".join(f"{label} {total:.0f}" for label, total in seconds.items()))
    print(f"{len(findings)} findings" + (":" if findings else ""))
    for finding in findings:
        print("  " + finding)
    return 1 if any("jitprof's readers" in finding or "unwind compiler" in finding for finding in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
