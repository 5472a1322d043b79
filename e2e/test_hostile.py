"""What any user on the machine can do to root's `jitprof --all`: each attack
is a real unprivileged process (nobody), and the run must end on time with
its outputs, say what it dropped and why, and name what it could."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from e2e.conftest import NOBODY, StderrLines, jitprof_environment, read_folded, total
from e2e.test_native_profile import cpu_seconds
from profiler.model.raw import read_raw
from profiler.native.locator_process import DEADLINE_S
from tests.native.test_elf_damaged import forged_notes_file


def as_nobody(background, code: str) -> subprocess.Popen:
    """An attacker: python running `code` as nobody, from /, told nothing."""
    return background(
        "/usr/bin/python3",
        "-c",
        textwrap.dedent(code),
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )


def run_all(
    symbol_cache: Path, workdir: Path, seconds: int, *flags: str, sampled_cpu: dict[int, float] | None = None
) -> tuple[subprocess.CompletedProcess, float, int]:
    """jitprof --all for `seconds`: its result (its CPU seconds and read
    system calls, with its helpers', as result.cpu_seconds and
    result.read_calls), wall time, and its own peak RSS (KiB).
    sampled_cpu's pids get their CPU seconds while jitprof sampled (from
    when it says it samples, for `seconds`): what its samples of them can
    follow, on a CPU of any speed."""
    command = [sys.executable, "-m", "profiler", "--all", *flags, "-F", "199", "-d", str(seconds), "--by-pid", "-o", "all.folded"]
    reads_before = read_calls()
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=workdir, env=jitprof_environment(symbol_cache), stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    said = StderrLines(process.stderr)
    deadline = started + seconds + 60
    peak_kib = 0
    window: dict[int, float] = {}  # pid -> its CPU seconds when sampling began
    window_end = 0.0  # -d counts from then (its perf events stay open while it names, after)

    def close_window() -> None:
        if sampled_cpu is not None and window and not any(sampled_cpu.values()):
            sampled_cpu.update({pid: cpu_seconds(pid) - before for pid, before in window.items()})

    while time.monotonic() < deadline:
        if sampled_cpu is not None and not window and said.sampling.is_set():
            window = {pid: cpu_seconds(pid) for pid in sampled_cpu}
            window_end = time.monotonic() + seconds
        elif window and time.monotonic() >= window_end:
            close_window()
        # jitprof's own peak (VmHWM), not its helpers': the naming helper has
        # its own address-space limit, and wait4's figure would fold it in.
        try:
            status_text = Path(f"/proc/{process.pid}/status").read_text()
            peak_kib = max(peak_kib, int(status_text.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError, ValueError):
            pass
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.1)
    else:
        process.kill()
        process.wait()
        pytest.fail(f"jitprof --all -d {seconds} still ran after {seconds + 60} s: {said.text()[-2000:]}")
    elapsed = time.monotonic() - started
    close_window()  # if it ended before a look
    process.returncode = os.waitstatus_to_exitcode(status)
    completed = subprocess.CompletedProcess(command, process.returncode, "", said.text(10))
    completed.cpu_seconds = usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]
    completed.read_calls = read_calls() - reads_before  # type: ignore[attr-defined]
    return completed, elapsed, peak_kib


def read_calls() -> int:
    """This process's read system calls, with those of its children reaped
    so far (the kernel adds a child's I/O counts to its parent's at the
    reap): jitprof's and its helpers', once it is waited for."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no syscr")


def samples_of(folded: Path, pid: int) -> int:
    return total([line for line in read_folded(folded) if line.frames[0].endswith(f"-{pid}")])


def test_a_forged_elf_any_user_maps_does_not_hold_the_run(symbol_cache, tmp_path, background, nobody_dir, unattacked_seconds):
    """2,000 PT_NOTE headers over one zeroed MiB, mapped PROT_READ|PROT_EXEC by
    nobody: the run froze for over ten minutes and ignored SIGTERM. Now the
    file is refused after reading its headers, the run ends on time, and the
    summary names the file and the process."""
    forged = forged_notes_file(nobody_dir / "notes.so", 2000)
    os.chown(forged, NOBODY, NOBODY)
    attacker = as_nobody(
        background,
        f"""
        import mmap, os, sys, time
        descriptor = os.open({str(forged)!r}, os.O_RDONLY)
        mapped = mmap.mmap(descriptor, 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
        print("mapped", flush=True)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            sum(range(1000))
    """,
    )
    assert attacker.stdout.readline().strip() == "mapped"
    result, elapsed, _ = run_all(symbol_cache, tmp_path, 3)
    assert result.returncode == 0, result.stderr
    assert elapsed < 3 * unattacked_seconds(3), (elapsed, unattacked_seconds(3))
    assert samples_of(tmp_path / "all.folded", attacker.pid) >= 200
    warnings = [line for line in result.stderr.splitlines() if str(forged) in line]
    assert len(warnings) == 1 and f"pid {attacker.pid}" in warnings[0] and "program headers" in warnings[0], result.stderr


ORDINARY_RECORD_BYTES = 32 << 10

# Code that spins in anonymous executable memory, as JIT code would: `jmp .`
# at the start of an RWX page, run on THREADS threads through ctypes.
SPIN_IN_JIT_CODE = """
    import ctypes, mmap, sys, threading, time
    THREADS = 1
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\\xeb\\xfe")
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    for _ in range(THREADS):
        threading.Thread(target=ctypes.CFUNCTYPE(None)(address), daemon=True).start()
    print(hex(address), flush=True)
    time.sleep(60)
"""


def test_a_perf_map_of_ten_million_entries_is_cut_at_its_limit(symbol_cache, tmp_path, background, unattacked_seconds):
    """nobody's own /tmp/perf-PID.map with 10 M entries (109 MB, under the
    byte limit) took the run to 1.6 GB and 34-49 s, and lost samples. Now the map is read up to
    its entry limit: the run ends on time, memory stays bounded, the code the
    map names first is named, and the summary says where reading stopped."""
    attacker = as_nobody(background, SPIN_IN_JIT_CODE)
    code_address = int(attacker.stdout.readline(), 16)
    perf_map = Path(f"/tmp/perf-{attacker.pid}.map")
    try:
        with open(perf_map, "wb") as handle:
            handle.write(b"%x 1000 attacker_jit_code\n" % code_address)
            base = 0x7F0000000000
            block = 1_000_000
            for first in range(0, 10_000_000, block):
                handle.write(b"".join(b"%x 1 a\n" % (base + number) for number in range(first, first + block)))
        os.chown(perf_map, NOBODY, NOBODY)
        assert perf_map.stat().st_size > 100 << 20
        sampled_cpu = {attacker.pid: 0.0}
        result, elapsed, peak_kib = run_all(symbol_cache, tmp_path, 3, sampled_cpu=sampled_cpu)
    finally:
        perf_map.unlink(missing_ok=True)
    assert result.returncode == 0, result.stderr
    # Read whole, the map took 34-49 s where a run takes 5 s.
    assert elapsed < 3 * unattacked_seconds(3), (elapsed, unattacked_seconds(3))
    assert peak_kib < 400 << 10, f"peak RSS {peak_kib >> 10} MiB"
    assert ", 0 lost;" in result.stderr, result.stderr
    lines = [line for line in read_folded(tmp_path / "all.folded") if line.frames[0].endswith(f"-{attacker.pid}")]
    named = [line for line in lines if line.frames[-1].startswith("attacker_jit_code")]
    # Its samples follow the CPU it had while jitprof sampled (at full speed about 600).
    expected = 199 * sampled_cpu[attacker.pid]
    assert expected > 0 and total(lines) >= 0.8 * expected, (total(lines), expected)
    assert total(named) >= 0.9 * total(lines), (total(named), total(lines))
    warnings = [line for line in result.stderr.splitlines() if f"perf map of pid {attacker.pid}" in line]
    assert len(warnings) == 1 and "500,000 entries" in warnings[0], result.stderr


def test_the_perf_map_of_an_earlier_process_with_the_same_pid_is_not_read(jitprof, tmp_path, background):
    """pids are reused (CI wraps 32,768 in a run): /tmp/perf-PID.map left by
    an earlier process, root's or the target's own user's, names another
    program's code. Written before the target started, it is not read, and
    not warned of; once the target writes it, it is read."""
    attacker = as_nobody(background, SPIN_IN_JIT_CODE)
    code_address = int(attacker.stdout.readline(), 16)
    perf_map = Path(f"/tmp/perf-{attacker.pid}.map")
    an_hour_before = time.time() - 3600

    def named_after_a_run(owner: int, modified: float) -> tuple[bool, str]:
        os.chown(perf_map, owner, owner)
        os.utime(perf_map, (modified, modified))
        run = jitprof("--pid", str(attacker.pid), "-d", "1", "-o", "out.folded")
        assert run.returncode == 0, run.stderr
        frames = {frame for line in read_folded(tmp_path / "out.folded") for frame in line.frames}
        return any(frame.startswith("attacker_jit_code") for frame in frames), run.stderr

    try:
        perf_map.write_bytes(b"%x 1000 attacker_jit_code\n" % code_address)
        named, said = named_after_a_run(0, an_hour_before)
        assert not named and "perf map" not in said, said
        named, said = named_after_a_run(NOBODY, an_hour_before)
        assert not named and "perf map" not in said, said
        named, said = named_after_a_run(NOBODY, time.time())
        assert named, said
    finally:
        perf_map.unlink(missing_ok=True)


def test_threads_spinning_where_frame_pointers_mislead_send_small_copies(symbol_cache, tmp_path, background):
    """Code without frame pointers, spinning on every CPU: the frame-pointer
    step from it reads a return address where nothing is mapped, and the
    stack is copied for user space to walk. Where the memory above a
    thread's stack was readable, that copy was 128-256 KiB a sample (137 KiB
    on average, 150 MB in 3 s): the 4 MiB ring filled whenever jitprof's
    reader was held up for a few tens of milliseconds, and the samples of
    every process went with it (6-27 lost beside a large perf map). Now such
    a copy is the ordinary one at most, and nothing is lost."""
    spinners = os.cpu_count() or 2
    attacker = as_nobody(background, SPIN_IN_JIT_CODE.replace("THREADS = 1", f"THREADS = {spinners}"))
    attacker.stdout.readline()
    sampled_cpu = {attacker.pid: 0.0}
    result, _, _ = run_all(symbol_cache, tmp_path, 3, "-o", "all.jitprof", sampled_cpu=sampled_cpu)
    assert result.returncode == 0, result.stderr
    assert ", 0 lost;" in result.stderr, result.stderr
    # Its samples follow the CPU it had while jitprof sampled.
    expected = 199 * sampled_cpu[attacker.pid]
    assert expected > 0 and samples_of(tmp_path / "all.folded", attacker.pid) >= 0.8 * expected, (expected, result.stderr)
    # Every sample a copy, each record an ordinary one: within the 32 KiB a
    # CPU's walk state holds (the deep ones are reserved at 32-256 KiB).
    traffic = read_raw(tmp_path / "all.jitprof").traffic
    assert traffic.stack_copies >= 0.8 * expected, traffic
    assert traffic.sample_bytes <= ORDINARY_RECORD_BYTES * traffic.samples, traffic


# A library of 64 functions, each its own addresses, that a program loads
# with dlopen and runs round robin: every function is a new address to name.
ATTACKER_LIBRARY = (
    "\n".join(
        f"__attribute__((noinline)) long work_{index}(long n) {{ long s = 0; for (long i = 0; i < n; i++) s += i * {index + 3}; return s; }}"
        for index in range(128)
    )
    + "\nlong (*const functions[])(long) = {"
    + ", ".join(f"work_{index}" for index in range(128))
    + "};\n"
)

ATTACKER_PROGRAM = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static const char *library;
static long keep;
static volatile int first = 0; /* the functions run: 0-63, and 64-127 once the file is cut */
/* On a line from stdin: the library is cut past its loaded segments, and
   functions whose addresses were never named run (blazesym reads on). */
static void *cut(void *unused) {
    char line[64];
    if (fgets(line, sizeof line, stdin) && truncate(library, atol(line)) == 0) {
        first = 64;
        puts("cut"); fflush(stdout);
    }
    return NULL;
}
int main(int argc, char **argv) {
    library = argv[1];
    void *handle = dlopen(library, RTLD_NOW);
    if (!handle) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    long (*const *functions)(long) = dlsym(handle, "functions");
    pthread_t thread;
    pthread_create(&thread, NULL, cut, NULL);
    puts("running"); fflush(stdout);
    time_t end = time(NULL) + atoi(argv[2]);
    while (time(NULL) < end)
        for (int index = first; index < first + 64; index++) keep += functions[index](20000);
    return (int)(keep & 1);
}
"""


def helper_maps(path: Path) -> bool:
    """Does a confined naming helper have the file mapped (blazesym opened it)?"""
    from profiler.safety.sandbox import HELPER_UID  # noqa: PLC0415

    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"Uid:\t{HELPER_UID}\t" in status.read_text() and str(path) in (status.parent / "maps").read_text():
                return True
        except OSError:
            continue
    return False


# Each attack: how the attacker's library is made, and whether blazesym fails
# on it (one summary line) or is simply kept from what it names.
ATTACKS = {
    "truncated": ("build", True),
    "compression-bomb": ("compressed_size_bomb", True),
    "fifo-debuglink": ("fifo_debuglink", False),
    "line-table": ("line_table_without_files", True),
    "100k-nested-inlines": ("deep_inlines", True),
    "200-GB-sparse-debuglink": ("sparse_debug_link", False),
    "8-GiB-line-strings": ("line_string_bomb", True),
    "2M-units": ("many_units", True),
    "50M-line-rows": ("many_rows", False),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_file_that_breaks_blazesym_costs_its_names_only(
    symbol_cache, tmp_path, background, nobody_dir, attack, unattacked_seconds
):
    """nobody's library made to crash, hang or blow up blazesym: a SIGBUS (cut
    under its mapping), a panic (a compression header claiming 2^64 bytes, a
    line table whose rows name files it does not list), a stack overflow
    (100,000 nested inlined calls), a hang (a debug link to a FIFO), gigabytes
    (a debug link to a 200 GB sparse file, 2 M compile units, a .debug_line_str
    inflating to 8 GiB, 50 M line rows). Each killed root's jitprof or held it
    for half a minute. Now --all -d 5 ends within 12 s with its outputs, a
    bystander (root's own -g program) is named with its inlined function, and
    the summary names the file once when blazesym could not read it."""
    from tests import hostile_elf  # noqa: PLC0415

    maker, fails = ATTACKS[attack]
    flags = ["-g", "-shared", "-fPIC"]
    if maker == "build":
        library = hostile_elf.build(nobody_dir, "attack", *flags, source=ATTACKER_LIBRARY)
    else:
        library = getattr(hostile_elf, maker)(nobody_dir, source=ATTACKER_LIBRARY, flags=flags)
    program = hostile_elf.build(nobody_dir, "attacker", "-ldl", "-lpthread", source=ATTACKER_PROGRAM)
    for path in nobody_dir.iterdir():
        os.chown(path, NOBODY, NOBODY)
    bystander = hostile_elf.build(tmp_path, "bystander", "-g")
    attacker = background(
        str(program), str(library), "40", user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
        env={}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert attacker.stdout.readline().strip() == "running"
    innocent = background(str(bystander), "40")
    outcome: dict = {}
    sampled_cpu = {innocent.pid: 0.0, attacker.pid: 0.0}
    runner = threading.Thread(target=lambda: outcome.update(run=run_all(symbol_cache, tmp_path, 5, sampled_cpu=sampled_cpu)))
    runner.start()
    if attack == "truncated":
        deadline = time.monotonic() + 20
        while not helper_maps(library) and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.05)
        assert helper_maps(library), "blazesym never mapped the library"
        attacker.stdin.write(f"{hostile_elf.load_end(library)}\n")
        attacker.stdin.flush()
        assert attacker.stdout.readline().strip() == "cut"
    runner.join(90)
    # What 199 Hz over the 5 s of sampling can give each, from its own CPU
    # time while jitprof sampled.
    expected = {pid: 199 * seconds for pid, seconds in sampled_cpu.items()}
    assert min(expected.values()) > 0, expected  # sampling was seen to begin and end
    result, elapsed, peak_kib = outcome["run"]
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    # An attack may cost one helper's deadline over an unattacked run under
    # the same load, and a new helper reading again what the killed one had
    # read (on a CPU at half speed, as long again as the run itself).
    assert elapsed < 2 * unattacked_seconds(5) + DEADLINE_S, (elapsed, unattacked_seconds(5))
    assert peak_kib < 300 << 10, f"peak RSS {peak_kib >> 10} MiB"
    assert ", 0 lost;" in result.stderr, f"samples lost: {result.stderr}"
    lines = read_folded(tmp_path / "all.folded")
    mine = [line for line in lines if line.frames[0].endswith(f"-{innocent.pid}")]
    hot = [line for line in mine if "hot" in line.frames]
    # Samples follow the CPU each got, beside the attacker and the run on 2 cores.
    assert total(mine) >= min(300, 0.4 * expected[innocent.pid]), (total(mine), expected)
    assert total(hot) >= 0.9 * total(mine), (total(hot), total(mine))
    inlined = sum(line.count for line in hot if line.frames[-1] == "mix_[i]")  # from its DWARF, through blazesym
    assert inlined >= 0.5 * total(hot), mine
    assert samples_of(tmp_path / "all.folded", attacker.pid) >= min(300, 0.4 * expected[attacker.pid]), expected
    warnings = [line for line in result.stderr.splitlines() if str(library) in line]
    if fails:
        assert len(warnings) == 1 and "blazesym" in warnings[0], f"{len(warnings)} warnings: {result.stderr}"
    else:
        assert warnings == [], f"{len(warnings)} warnings: {result.stderr}"
