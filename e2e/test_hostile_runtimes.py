"""What any user can do to root's jitprof through the runtimes it names:
a program called bun, scripts crafted against the parsers of bun's copies.
Each attacker is a real unprivileged process (nobody) with its files made
here; the run must end on time, bounded, and never run what a target chose."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from e2e.conftest import FIXTURES, NOBODY, read_folded, total
from e2e.test_hostile import as_nobody, read_calls, run_all, samples_of
from e2e.test_javascript_runtimes import BUN, DENO
from e2e.test_native_profile import cpu_seconds
from profiler.jit.bun.transpiler import OWN_BUN
from profiler.jit.jvm.hotspot.layout import LayoutError, layout_of
from profiler.jit.jvm.hotspot_source import libjvm_of
from profiler.kernel.process_memory import ProcessMemory
from profiler.native.locator_process import DEADLINE_S
from tests import hostile_elf

pytestmark = pytest.mark.skipif(not (BUN.exists() and OWN_BUN.exists()), reason="bun is installed by make test's set-up")

# A program called bun. Run with transpile.js's arguments (as jitprof once
# ran /proc/PID/exe), it marks that it ran, opens the terminal of whoever
# ran it and fakes an answer; run as itself, it spins until told to stop.
FAKE_BUN = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strstr(argv[1], "transpile")) {
        close(open("MARK_RAN", O_WRONLY | O_CREAT, 0644));
        if (open("/dev/tty", O_RDWR) >= 0) close(open("MARK_TTY", O_WRONLY | O_CREAT, 0644));
        puts("{\"scripts\": [], \"problems\": []}");
        return 0;
    }
    puts("ready"); fflush(stdout);
    volatile unsigned long spin = 0;
    time_t end = time(NULL) + 20;
    while (time(NULL) < end) spin++;
    return 0;
}
"""


def test_a_program_called_bun_is_never_run_by_root(symbol_cache, tmp_path, background, nobody_dir):
    """nobody's own program, named bun: root's jitprof executed it (to
    transpile its scripts) in root's session, where it could type into
    root's shell. Now jitprof's own bun reads the process's command line,
    and the program runs only as nobody started it."""
    marks = [nobody_dir / "ran", nobody_dir / "tty"]
    source = FAKE_BUN.replace("MARK_RAN", str(marks[0])).replace("MARK_TTY", str(marks[1]))
    fake = hostile_elf.build(nobody_dir, "bun", source=source)
    os.chown(fake, NOBODY, NOBODY)
    attacker = as_nobody(background, f"import os; os.execv({str(fake)!r}, ['bun', 'app.js'])")
    assert attacker.stdout.readline().strip() == "ready"
    result, elapsed, _ = run_all(symbol_cache, tmp_path, 3)
    assert result.returncode == 0, result.stderr
    assert [mark for mark in marks if mark.exists()] == []
    assert samples_of(tmp_path / "all.folded", attacker.pid) > 0


def bun_as_nobody(background, directory: Path, *scripts: Path) -> subprocess.Popen:
    """The real bun run by nobody on its own scripts; it prints ready and spins."""
    return background(
        str(BUN), *(str(script) for script in scripts),
        user=NOBODY, group=NOBODY, extra_groups=[], cwd=str(directory),
        env={"PATH": "/usr/bin:/bin", "HOME": str(directory)}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


SPIN = """
console.log("ready");
function spin(until) { let total = 0; while (Date.now() < until) total += Math.sqrt(total + 1); return total; }
spin(Date.now() + 20000);
"""


def test_a_script_crafted_against_the_definition_patterns_does_not_stop_jitprof(
    symbol_cache, tmp_path, background, nobody_dir, unattacked_seconds
):
    """A comment of 72 kB of `a$a$…` in nobody's script made a backtracking
    pattern hold the GIL for minutes: every thread of jitprof stopped, an
    `--all -d 5` took 82 s and lost 9,847 samples. Now the patterns are
    linear: the run ends on time and loses nothing."""
    script = nobody_dir / "app.js"
    script.write_text("// " + "a$" * 36_000 + "\n" + SPIN)
    os.chown(script, NOBODY, NOBODY)
    attacker = bun_as_nobody(background, nobody_dir, script)
    assert attacker.stdout.readline().strip() == "ready"
    cpu_before = cpu_seconds(attacker.pid)
    seconds = 5
    result, elapsed, _ = run_all(symbol_cache, tmp_path, seconds)
    assert result.returncode == 0, result.stderr
    assert elapsed < 1.5 * unattacked_seconds(seconds) + DEADLINE_S, (elapsed, unattacked_seconds(seconds))
    assert ", 0 lost;" in result.stderr, result.stderr
    ran = cpu_seconds(attacker.pid) - cpu_before
    assert samples_of(tmp_path / "all.folded", attacker.pid) >= min(300, 0.4 * 199 * ran)


def test_scripts_of_newlines_keep_jitprof_s_memory_bounded(symbol_cache, tmp_path, background, nobody_dir):
    """Three of nobody's buns, each naming 15 MiB of newlines (under the
    transpiler's 16 MiB): one Python int a line took jitprof to 1.29 GB.
    Now its peak stays within 200 MiB of a run without them, measured here."""
    baseline_directory = tmp_path / "baseline"
    baseline_directory.mkdir()
    _result, _elapsed, baseline_kib = run_all(symbol_cache, baseline_directory, 3)
    spin = nobody_dir / "spin.js"
    spin.write_text(SPIN)
    attackers = []
    for index in range(3):
        lines = nobody_dir / f"lines{index}.js"
        lines.write_text("\n" * (15 << 20) + f"var x{index} = {index};\n")
        os.chown(lines, NOBODY, NOBODY)
        attackers.append(bun_as_nobody(background, nobody_dir, spin, lines))
    for attacker in attackers:
        assert attacker.stdout.readline().strip() == "ready"
    result, _elapsed, peak_kib = run_all(symbol_cache, tmp_path, 5)
    assert result.returncode == 0, result.stderr
    assert peak_kib < baseline_kib + (200 << 10), f"peak RSS {peak_kib >> 10} MiB, {baseline_kib >> 10} MiB without the attack"


PLANTED_PIDS = 3000  # the next pids: a run starts its command within a few dozen


def plant_links(directory: Path, victim: Path) -> list[Path]:
    """As nobody: a link at every name a runtime started next could write
    (its perf map, its jitdumps), each pointing at root's file."""
    first = int(Path("/proc/sys/kernel/ns_last_pid").read_text()) + 1
    names = []
    for pid in range(first, first + PLANTED_PIDS):
        names += [f"/tmp/perf-{pid}.map", f"/tmp/jit-{pid}.dump", f"/tmp/jit-{pid}-{pid}.dump"]
    listing = directory / "names"
    listing.write_text("\n".join(names))
    os.chown(listing, NOBODY, NOBODY)
    subprocess.run(
        ["/usr/bin/python3", "-c", f"""
import os
for name in open({str(listing)!r}).read().split():
    try:
        os.symlink({str(victim)!r}, name)
    except FileExistsError:
        pass
"""],
        user=NOBODY, group=NOBODY, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    return [Path(name) for name in names]


CHAIN = Path(__file__).parent.parent / "fixtures" / "js" / "portable_chain.mjs"
RUNTIME_COMMANDS = {
    "node": lambda: ["node", str(CHAIN), "0.5"],
    "deno": lambda: [str(DENO), "run", str(CHAIN), "0.5"],
    "bun": lambda: [str(BUN), str(CHAIN), "0.5"],
    # A node the command starts in turn, under a pid not known before it runs.
    "node started by a shell": lambda: ["/bin/sh", "-c", f"node {CHAIN} 0.5; true"],
}


@pytest.mark.parametrize("runtime", list(RUNTIME_COMMANDS))
def test_links_planted_at_a_runtime_s_files_never_make_root_write_through_them(jitprof, tmp_path, nobody_dir, runtime):
    """nobody plants links at /tmp/perf-PID.map and /tmp/jit-*PID.dump for
    the next pids, to a file of root's; root runs `jitprof -- node/deno/bun`.
    The runtime, run as root with jitprof's flags, followed the link and
    overwrote root's file (this kernel does not protect links in /tmp). Now
    its perf map is a file jitprof made for it first, and its jitdump goes to
    a directory of root's own, and links planted for pids not running yet
    are removed before the command runs (a node the command starts in turn
    writes its map under a pid no one knows before): root's file is
    untouched, the user is told, and the JavaScript is still named."""
    if runtime == "deno" and not DENO.exists():
        pytest.skip("deno is installed by make test's set-up")
    victim = tmp_path / "secret"
    victim.write_text("root's own\n")
    victim.chmod(0o600)
    links = plant_links(nobody_dir, victim)
    try:
        run = jitprof("-F", "499", "-o", "out.folded", "--", *RUNTIME_COMMANDS[runtime]())
    finally:
        for link in links:
            if link.is_symlink():
                link.unlink()
    assert run.returncode == 0, run.stderr
    assert victim.read_text() == "root's own\n"
    said = [line for line in run.stderr.splitlines() if "links that uid 65534 planted in /tmp" in line]
    assert len(said) == 1, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    named = [line for line in lines if any(frame.endswith("_[j]") and not frame.startswith("0x") for frame in line.frames)]
    assert total(named) > 0, run.stderr


def test_a_name_in_dev_shm_taken_by_another_user_sends_bun_s_dumps_to_disk(jitprof, tmp_path):
    """Where /run is no tmpfs, bun's dumps go to /dev/shm/jitprof, in a
    directory any user can write to: nobody takes the name first, with a link
    inside to a directory of root's. jitprof never goes through it (it is not
    root's): the dumps go to /var/lib/jitprof instead, root's directory is
    untouched, and the JavaScript is still named."""
    from profiler.jit import jitdump_files  # noqa: PLC0415

    mounts = jitdump_files._filesystem_types()
    if jitdump_files._filesystem_of("/run/jitprof/jitdumps", mounts) == "tmpfs":
        pytest.skip("/run is a tmpfs here: the dumps go there, where only root can write")
    if jitdump_files._filesystem_of("/dev/shm", mounts) != "tmpfs":
        pytest.skip("no /dev/shm tmpfs here")
    taken = Path("/dev/shm/jitprof")
    aside = Path(f"/dev/shm/jitprof-aside-{os.getpid()}")
    if taken.exists() or taken.is_symlink():
        taken.rename(aside)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    try:
        for command in (["mkdir", "-m", "0755", str(taken)], ["ln", "-s", str(victim), str(taken / "jitdumps")]):
            subprocess.run(command, user=NOBODY, group=NOBODY, extra_groups=[], check=True)
        assert taken.stat().st_uid == NOBODY
        run = jitprof("-F", "499", "-o", "out.folded", "--", str(BUN), str(CHAIN), "0.5")
        assert run.returncode == 0, run.stderr
        assert list(victim.iterdir()) == [] and victim.stat().st_uid == 0
        assert sorted(path.name for path in taken.iterdir()) == ["jitdumps"] and (taken / "jitdumps").is_symlink()
        lines = read_folded(tmp_path / "out.folded")
        named = [line for line in lines if any(frame.endswith("_[j]") and not frame.startswith("0x") for frame in line.frames)]
        assert total(named) > 0, run.stderr
    finally:
        subprocess.run(["rm", "-rf", str(taken)], check=False)
        if aside.exists():
            aside.rename(taken)


# A libjvm.so of nobody's whose VM tables hold 32,767 entries each (a real
# JDK's about 3,000), every name its own string, and nothing jitprof needs.
FAKE_LIBJVM = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#define ENTRIES 32767
struct field_entry { const char *type, *field, *declared; int32_t is_static; uint64_t offset; void *address; };
struct type_entry { const char *name, *super; int32_t a, b, c, d; uint64_t size; };
struct field_entry *gHotSpotVMStructs;
uint64_t gHotSpotVMStructEntryArrayStride = sizeof(struct field_entry), gHotSpotVMStructEntryTypeNameOffset = 0,
    gHotSpotVMStructEntryFieldNameOffset = 8, gHotSpotVMStructEntryTypeStringOffset = 16,
    gHotSpotVMStructEntryIsStaticOffset = 24, gHotSpotVMStructEntryOffsetOffset = 32, gHotSpotVMStructEntryAddressOffset = 40;
struct type_entry *gHotSpotVMTypes;
uint64_t gHotSpotVMTypeEntryArrayStride = sizeof(struct type_entry), gHotSpotVMTypeEntryTypeNameOffset = 0,
    gHotSpotVMTypeEntrySizeOffset = 32;
static char *name(const char *prefix, int index) { char *text = malloc(32); snprintf(text, 32, "%s%d", prefix, index); return text; }
__attribute__((constructor)) static void build(void) {
    gHotSpotVMStructs = calloc(ENTRIES + 1, sizeof *gHotSpotVMStructs);
    gHotSpotVMTypes = calloc(ENTRIES + 1, sizeof *gHotSpotVMTypes);
    for (int index = 0; index < ENTRIES; index++) {
        gHotSpotVMTypes[index] = (struct type_entry){name("Type", index), 0, 0, 0, 0, 0, 8};
        gHotSpotVMStructs[index] = (struct field_entry){name("Struct", index), name("_field", index), name("int", index), 0, 8, 0};
    }
}
int jvm_loaded(void) { return 0; }
"""

# A program called java, on that library: four children a second, each
# working a little, then waiting a second, for `seconds`.
FAKE_JAVA = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int jvm_loaded(void);
int main(int argc, char **argv) {
    signal(SIGCHLD, SIG_IGN);
    puts("ready"); fflush(stdout);
    for (int round = 0; round < atoi(argv[1]) * 4; round++) {
        if (fork() == 0) {
            volatile long spin = 0;
            for (long step = 0; step < 50000000; step++) spin++;
            sleep(1);
            _exit(jvm_loaded());
        }
        usleep(250000);
    }
    return 0;
}
"""


def test_a_fake_jvm_forking_children_costs_jitprof_one_refusal(symbol_cache, tmp_path, background, nobody_dir):
    """nobody's program called java, on a libjvm.so whose tables are 32,767
    entries of nothing, forks four children a second: each child's tables
    were read again (0.6 s each on one CPU, 25 ms on another), a failure
    never remembered, and jitprof's CPU went from 0.9 s to 9.2 s for -d 10.
    Now the build is read at most once a pause whatever JVM asks (tables of
    more than 8,192 entries are no JVM's), then refused. Judged by the read
    system calls jitprof makes against those of one read of the tables,
    measured here: a whole-machine run's CPU spreads more (0.7-3.2 s on one
    machine) than a per-child read costs on a fast CPU."""
    library_directory = nobody_dir / "lib"
    library_directory.mkdir()
    source = library_directory / "libjvm.c"
    source.write_text(FAKE_LIBJVM)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(library_directory / "libjvm.so"), str(source)], check=True)
    (nobody_dir / "java.c").write_text(FAKE_JAVA)
    java = nobody_dir / "java"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-o",
            str(java),
            str(nobody_dir / "java.c"),
            f"-L{library_directory}",
            "-ljvm",
            f"-Wl,-rpath,{library_directory}",
        ],
        check=True,
    )
    for path in [library_directory, *library_directory.iterdir(), java]:
        os.chown(path, NOBODY, NOBODY)
    seconds = 8
    baseline_directory = tmp_path / "baseline"
    baseline_directory.mkdir()
    baseline, _elapsed, _peak = run_all(symbol_cache, baseline_directory, seconds)
    attacker = as_nobody(background, f"import os; os.execv({str(java)!r}, ['java', '{seconds + 4}'])")
    assert attacker.stdout.readline().strip() == "ready"
    one_read = table_read_calls(attacker.pid)
    result, _elapsed, _peak = run_all(symbol_cache, tmp_path, seconds)
    assert result.returncode == 0, result.stderr
    refused = [line for line in result.stderr.splitlines() if "introspection tables" in line or "libjvm" in line]
    assert refused, result.stderr
    # Read at 0, 0.2, 0.6, 1.4, 3 and 5 s (the pause doubles), then refused
    # for good: 6 reads, 7 when one ends past its pause. A read per child
    # is 32 or more.
    reads = (result.read_calls - baseline.read_calls) / one_read
    assert reads < 10, (reads, one_read, result.read_calls, baseline.read_calls, result.cpu_seconds, baseline.cpu_seconds)


def table_read_calls(pid: int) -> int:
    """The read system calls one read of the JVM's tables makes (jitprof's
    own code, in this process), which is refused."""
    found = libjvm_of(pid)
    assert found is not None, f"pid {pid} has no libjvm.so"
    path, bias = found
    memory = ProcessMemory(pid)
    try:
        before = read_calls()
        with pytest.raises(LayoutError):
            layout_of(memory, path, bias)
        return read_calls() - before
    finally:
        memory.close()


def test_a_storm_of_waits_keeps_off_cpu_memory_bounded(symbol_cache, tmp_path, background, fixtures_built):
    """200 of nobody's threads sleeping 2 ms again and again under
    `--off-cpu --all` (about 100,000 waits a second, each long enough to be
    kept on its own, far more than can be named as they come; python's
    ping-pong on its lock once made them, but at half speed it barely ran):
    the waits waited in memory, 255 MB against 61 MB. Now past
    30,000 waiting the rest are counted lost (and said): jitprof's peak
    stays within 120 MiB of a run without the storm, measured here (kept,
    it grew 240 MiB in 8 s)."""
    baseline_directory = tmp_path / "baseline"
    baseline_directory.mkdir()
    _result, _elapsed, baseline_kib = run_all(symbol_cache, baseline_directory, 8, "--off-cpu")
    attacker = background(
        str(FIXTURES / "storm"), "200", "30", "2000", user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
        env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert attacker.stdout.readline().strip() == "ready"
    result, _elapsed, peak_kib = run_all(symbol_cache, tmp_path, 8, "--off-cpu")
    attacker.kill()
    assert result.returncode == 0, result.stderr
    lost = int(result.stderr.split(" lost;")[0].rsplit(", ", 1)[1].replace(",", ""))
    # More waits than were kept: the bound was reached, and said.
    assert lost > 0 and samples_of(tmp_path / "all.folded", attacker.pid) > 0, result.stderr
    # And why, each kind with its count.
    reasons = [line.split("warning: ")[1] for line in result.stderr.splitlines() if " samples lost: " in line]
    assert sum(int(reason.split()[0].replace(",", "")) for reason in reasons) == lost, result.stderr
    assert peak_kib < baseline_kib + (120 << 10), f"peak RSS {peak_kib >> 10} MiB, {baseline_kib >> 10} MiB without the storm"
