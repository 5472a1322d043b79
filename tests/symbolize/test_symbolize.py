"""The mapping tracker and symbolizer against this test process's real maps."""

import ctypes
import dataclasses
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.events import RawSample, WalkEnd
from profiler.kernel.mappings import MappingTracker
from profiler.model.profile import FrameKind, Profile, RunInfo, Sample
from profiler.native.library import MAPPING_ELF, MAPPING_JIT
from profiler.symbolize.symbolizer import Symbolizer


class RecordingTrie:
    """Stands in for the BPF map: records what would be installed."""

    def __init__(self, capacity=100000):
        self.entries = {}
        self.capacity = capacity
        self.maps_read = {}  # pid -> exec count the maps were read at
        self.exec_counts = {}  # pid -> how many times the kernel saw it exec

    def add_prefixes(self, prefixes, kind, load_bias, table_id=0):
        rejected = 0
        for prefix in prefixes:
            if len(self.entries) >= self.capacity:
                rejected += 1
                continue
            self.entries[prefix] = (kind, load_bias)
        return rejected

    def remove_prefixes(self, prefixes):
        for prefix in prefixes:
            self.entries.pop(prefix, None)

    def begin_maps_read(self, pid):
        return self.exec_counts.get(pid, 0)

    def exec_count(self, pid):
        return self.exec_counts.get(pid, 0)

    def mark_maps_read(self, pid, exec_count):
        self.maps_read[pid] = exec_count


def libc_function_address(name):
    libc = ctypes.CDLL("libc.so.6")
    return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value


def test_tracker_installs_every_executable_mapping():
    trie = RecordingTrie()
    tracker = MappingTracker(trie)
    tracker.add_process(os.getpid())
    kinds = {kind for kind, _ in trie.entries.values()}
    assert MAPPING_ELF in kinds
    assert all(prefix.pid == os.getpid() for prefix in trie.entries)
    found = tracker.find(os.getpid(), time.monotonic_ns(), libc_function_address("qsort"))
    assert found.mapping is not None and "libc.so" in found.mapping.entry.path
    assert found.mapping.image is not None
    tracker.process_exit(os.getpid())
    assert trie.entries == {}
    # Gone from the trie, still known for symbolisation.
    assert tracker.find(os.getpid(), time.monotonic_ns(), libc_function_address("qsort")).mapping is not None
    tracker.close()


def test_anonymous_exec_memory_is_jit_kind():
    import mmap

    region = mmap.mmap(
        -1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
    )
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    trie = RecordingTrie()
    tracker = MappingTracker(trie)
    try:
        tracker.add_process(os.getpid())
        found = tracker.find(os.getpid(), time.monotonic_ns(), address)
        assert found.mapping is not None and found.mapping.entry.is_anonymous_exec
        kinds = [
            kind for prefix, (kind, _) in trie.entries.items() if prefix.address <= address < prefix.address + prefix.block_size
        ]
        assert kinds == [MAPPING_JIT]
    finally:
        tracker.close()
        del address
        region.close()


def test_full_trie_is_counted_not_fatal():
    tracker = MappingTracker(RecordingTrie(capacity=3))
    tracker.add_process(os.getpid())
    assert tracker.stats.trie_rejected > 0
    tracker.close()


def test_symbolizer_names_libc_functions_once():
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.start()
    qsort = libc_function_address("qsort")
    getpid = libc_function_address("getpid")
    for _ in range(50):
        # Caller frames are looked up at address-1: give the byte after a call.
        symbolizer.submit(
            [
                RawSample(
                    os.getpid(),
                    os.getpid(),
                    0,
                    time.monotonic_ns(),
                    "t",
                    (getpid + 1, qsort + 5, 0x10),
                    WalkEnd.NO_MAPPING,
                    -1,
                    True,
                )
            ]
        )
    symbolizer.finish()
    tracker.close()
    assert len(profile.samples) == 50 and symbolizer.errors == []
    names = [frame.name for frame in profile.stack(profile.samples[0])]
    assert names[-1] == "getpid" and names[-2] == "qsort"
    assert names[0] == "[unknown]" and profile.frames[profile.samples[0].frame_ids[0]].kind is FrameKind.UNKNOWN
    assert len(profile.frames) == 3  # memoised: three unique addresses, three frames


def test_a_repeated_stack_is_named_once_while_nothing_new_is_known():
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    news = {"revision": 0, "latest": 0}

    class News(JitSymbolSource):
        def epoch(self, pid):
            return (news["revision"], news["latest"])

    symbolizer.add_jit_source(News())
    stack = (libc_function_address("getpid") + 1, libc_function_address("qsort") + 5)

    def resolve():
        sample = RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", stack, WalkEnd.COMPLETE, -1, True)
        return [profile.frames[frame].name for frame in symbolizer.resolve_sample(sample).frame_ids]

    try:
        first = resolve()
        assert resolve() == first == ["qsort", "getpid"] and symbolizer.stack_hits == 1
        news["revision"] += 1  # a JIT source learnt something: named afresh
        assert resolve() == first and symbolizer.stack_hits == 1
        news["latest"] = time.monotonic_ns() + 10**9  # news about times after the next sample: not remembered
        resolve()
        resolve()
        assert symbolizer.stack_hits == 1
        news["latest"] = 0
        tracker.note_exec_range(os.getpid(), 0x10000000, 4096)  # the process's mappings changed
        resolve()
        assert symbolizer.stack_hits == 1
        resolve()
        assert symbolizer.stack_hits == 2
    finally:
        tracker.close()


def test_a_leaf_whose_caller_the_walk_skipped_is_a_stack_cut_at_the_leaf():
    """A source that knows the kernel's walk skipped the leaf's caller (a JVM's
    leaf in a prologue, walked before the kernel could step it): the sample
    keeps its leaf alone and says its walk was cut, never a wrong chain."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    getpid, qsort = libc_function_address("getpid"), libc_function_address("qsort")

    class Skipped(JitSymbolSource):
        def leaf_caller_skipped(self, pid, time_ns, leaf):
            return leaf == getpid + 2

    symbolizer.add_jit_source(Skipped())

    def resolve(leaf: int) -> Sample:
        sample = RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (leaf, qsort + 5), WalkEnd.COMPLETE, -1, True)
        return symbolizer.resolve_sample(sample)

    try:
        whole, cut = resolve(getpid + 1), resolve(getpid + 2)
        assert [profile.frames[frame].name for frame in whole.frame_ids] == ["qsort", "getpid"]
        assert whole.walk_end is WalkEnd.COMPLETE
        assert [profile.frames[frame].name for frame in cut.frame_ids] == ["getpid"] and cut.walk_end is WalkEnd.BAD_FRAME
    finally:
        tracker.close()


def test_callers_are_remembered_while_the_leaf_moves():
    """A loop's samples differ in their leaf's address only: their callers
    are named once, each leaf on its own; other callers are named afresh."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    qsort, getpid, abort = (libc_function_address(name) for name in ("qsort", "getpid", "abort"))

    def resolve(*addresses, caller_words):
        sample = RawSample(
            os.getpid(),
            os.getpid(),
            0,
            time.monotonic_ns(),
            "t",
            addresses,
            WalkEnd.COMPLETE,
            -1,
            True,
            caller_words=caller_words,
        )
        return [profile.frames[frame].name for frame in symbolizer.resolve_sample(sample).frame_ids]

    try:
        assert resolve(getpid, qsort + 5, caller_words=b"qsort") == ["qsort", "getpid"]
        assert resolve(getpid + 2, qsort + 5, caller_words=b"qsort") == ["qsort", "getpid"]
        assert resolve(abort + 1, qsort + 5, caller_words=b"qsort") == ["qsort", "abort"]
        assert symbolizer.stack_hits == 2
        assert resolve(getpid, abort + 5, caller_words=b"abort") == ["abort", "getpid"]
        assert symbolizer.stack_hits == 2
        # A stack user space finished has no words from the kernel: its addresses are the key.
        assert resolve(getpid, abort + 5, qsort + 5, caller_words=b"") == ["qsort", "abort", "getpid"]
        assert resolve(getpid, abort + 5, qsort + 5, caller_words=b"") == ["qsort", "abort", "getpid"]
        assert symbolizer.stack_hits == 3
    finally:
        tracker.close()


def jit_sample(address, time_ns):
    """A one-frame sample of this process at an address in its JIT memory."""
    return RawSample(os.getpid(), os.getpid(), 0, time_ns, "t", (address,), WalkEnd.NO_MAPPING, -1, True)


def wait_for_samples(profile, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not profile.samples and time.monotonic() < deadline:
        time.sleep(0.02)


def test_jit_samples_wait_for_a_late_perf_map_line(tmp_path, monkeypatch):
    """A runtime writes a perf map line after its code starts running: the
    sample is parked, then named from the map once the line is there, and
    what is never named is shown as unknown at the end."""
    import mmap

    from profiler.jit.perfmap_source import PerfMapSymbols
    from profiler.symbolize import symbolizer as symbolizer_module

    monkeypatch.setattr(symbolizer_module, "PARK_RETRY_S", 0.02)
    region = mmap.mmap(-1, 8192, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    perf_map = tmp_path / "perf.map"
    perf_map.write_text("")
    monkeypatch.setattr("profiler.jit.perfmap_source.candidate_paths", lambda pid: [str(perf_map)])
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    perf_maps = PerfMapSymbols()
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.add_jit_source(perf_maps)
    symbolizer.start()
    try:
        now = time.monotonic_ns()
        symbolizer.submit([jit_sample(address + 16, now)])
        symbolizer.submit([jit_sample(address + 4096, now)])
        time.sleep(0.3)
        assert profile.samples == [] and symbolizer.backlog() == 2  # parked, not guessed
        perf_map.write_text(f"{address:x} 100 JS:*late /app/late.js:3:1\n")
        wait_for_samples(profile)
        assert [profile.stack(sample)[-1].name for sample in profile.samples] == ["late late.js:3"]
    finally:
        symbolizer.finish()
        perf_maps.close()
        tracker.close()
        del address
        region.close()
    # The second never had a name: the run's end gives up on it.
    assert [profile.stack(sample)[-1].name for sample in profile.samples] == ["late late.js:3", "[unknown] ([jit])"]
    assert symbolizer.parked_then_named == 1


def test_a_jit_address_s_frames_are_kept_while_its_source_says_its_code_held_them():
    """Compiled code named once: later samples at the same address take the
    frames kept while the source says that code was there at their time,
    and ask the source again once it says not (code replaced, or a sample
    from before it was there). Frames not named yet are never kept."""
    import mmap

    from profiler.model.profile import Frame

    region = mmap.mmap(-1, 8192, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)

    class Lifetime:
        def __init__(self, since_ns):
            self.since_ns = since_ns
            self.gone = False

        def names_sample_at(self, time_ns):
            return not self.gone and time_ns >= self.since_ns

    class Compiled(JitSymbolSource):
        def __init__(self):
            self.asked = 0
            self.name = "first"
            self.lifetime = Lifetime(0)
            self.unknown = set()

        def expand(self, pid, time_ns, address, caller=False):
            self.asked += 1
            if address in self.unknown:
                return (Frame("[unknown] ([jit])", "[jit]", FrameKind.UNKNOWN),)
            return (Frame("outer", "[jit]", FrameKind.JIT), Frame(self.name, "[jit]", FrameKind.JIT, inlined=True))

        def code_lifetime(self, pid, address):
            return self.lifetime

    source = Compiled()
    symbolizer.add_jit_source(source)

    def leaf_names(leaf, time_ns):
        sample = RawSample(os.getpid(), os.getpid(), 0, time_ns, "t", (leaf,), WalkEnd.COMPLETE, -1, True)
        return [profile.frames[frame].name for frame in symbolizer.resolve_sample(sample).frame_ids]

    try:
        assert leaf_names(address + 16, 100) == ["outer", "first"] and source.asked == 1
        assert leaf_names(address + 16, 200) == ["outer", "first"] and source.asked == 1
        source.lifetime.gone, source.name = True, "second"  # replaced: asked again, then kept anew
        source.lifetime = Lifetime(300)
        assert leaf_names(address + 16, 400) == ["outer", "second"] and source.asked == 2
        assert leaf_names(address + 16, 500) == ["outer", "second"] and source.asked == 2
        # A sample from before the new code was there is the source's to name.
        source.name = "before"
        assert leaf_names(address + 16, 250) == ["outer", "before"] and source.asked == 3
        source.unknown.add(address + 32)
        leaf_names(address + 32, 600)
        leaf_names(address + 32, 700)
        assert source.asked == 5
        symbolizer.forget_frame_ids()  # a new frame table: no id kept may be used again
        assert leaf_names(address + 16, 800) == ["outer", "before"] and source.asked == 6
    finally:
        tracker.close()
        del address
        region.close()


class StallingSource:
    """A symbol source stuck as if in open() on a FIFO a target planted."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def resolve(self, pid, mapping, address):
        self.release.wait(20)
        return None

    def resolve_chain(self, pid, mapping, address):
        return self.resolve(pid, mapping, address)


def stalled_symbolizer(samples: int):
    """A running symbolizer whose first source stalls, with samples queued."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    stalling = StallingSource()
    symbolizer.elf = stalling
    symbolizer.start()
    qsort = libc_function_address("qsort")
    for index in range(samples):
        symbolizer.submit(
            [RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (qsort + index,), WalkEnd.COMPLETE, -1, True)]
        )
    return profile, tracker, symbolizer, stalling


def test_finish_has_a_budget_and_counts_what_it_gave_up():
    profile, tracker, symbolizer, stalling = stalled_symbolizer(5)
    started = time.monotonic()
    symbolizer.finish(0.5)
    assert time.monotonic() - started < 2.0
    stalling.release.set()
    tracker.close()
    time.sleep(0.2)
    assert symbolizer.given_up >= 4 and len(profile.samples) + symbolizer.given_up <= 5


def test_finish_stops_at_once_when_the_user_insists():
    _profile, tracker, symbolizer, stalling = stalled_symbolizer(3)
    started = time.monotonic()
    symbolizer.finish(60.0, abandon=lambda: time.monotonic() - started > 0.3)
    assert time.monotonic() - started < 2.0
    stalling.release.set()
    tracker.close()


def test_retiring_a_process_names_what_waits_then_forgets_it_on_the_symbolizer_thread():
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.start()
    forgotten = []
    getpid = libc_function_address("getpid")
    symbolizer.submit([RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (getpid,), WalkEnd.COMPLETE, -1, True)])
    symbolizer.retire(os.getpid(), lambda: forgotten.append(threading.current_thread().name))
    symbolizer.finish()
    tracker.close()
    assert len(profile.samples) == 1 and symbolizer.errors == []
    assert forgotten == ["jitprof-symbolizer"]  # after the sample before it, on its thread
    assert os.getpid() not in symbolizer._memo and os.getpid() not in symbolizer._stacks


def test_files_no_process_maps_any_more_are_closed():
    """A long run keeps open what is running: once the last process mapping a
    file is forgotten, the file (and its symbols) goes."""
    trie = RecordingTrie()
    tracker = MappingTracker(trie)
    child = subprocess.Popen(["sleep", "30"])
    try:
        for _ in range(100):  # until sleep's text is mapped (exe changes before it is)
            if any(line.split()[-1].endswith("/sleep") and "x" in line.split()[1] for line in open(f"/proc/{child.pid}/maps")):
                break
            time.sleep(0.01)
        tracker.add_process(child.pid)
        tracker.add_process(os.getpid())
        sleep_image = tracker.find(child.pid, time.monotonic_ns(), _text_address(child.pid, "/sleep")).mapping.image
        assert sleep_image is not None and not sleep_image.handle.closed
    finally:
        child.kill()
        child.wait()
    tracker.process_exit(child.pid)
    tracker.forget(child.pid)
    assert sleep_image.handle.closed  # no one maps /usr/bin/sleep any more
    libc = tracker.find(os.getpid(), time.monotonic_ns(), libc_function_address("qsort")).mapping.image
    assert not libc.handle.closed  # this process still maps libc
    tracker.close()


def _text_address(pid, suffix):
    for line in open(f"/proc/{pid}/maps"):
        fields = line.split()
        if "x" in fields[1] and fields[-1].endswith(suffix):
            return int(fields[0].split("-")[0], 16)
    raise AssertionError(f"no {suffix} text in {pid}")


def libc_mapping_base():
    """libc's load bias in this process: its first mapping's start minus offset 0."""
    for line in open("/proc/self/maps"):
        fields = line.split()
        if len(fields) >= 6 and fields[5].endswith("/libc.so.6") and int(fields[2], 16) == 0:
            return int(fields[0].split("-")[0], 16)
    raise AssertionError("no libc mapping")


def test_native_frames_through_blazesym_inlined_and_plt():
    """libc's PLT stub is named `func@plt`; an address of qsort_r where glibc
    inlined msort_with_tmp is two frames, the inner one marked inlined, with
    libc6-dbg's file and line."""
    from profiler.native.linkage import linkage_symbols  # noqa: PLC0415
    from profiler.native.locator_process import CodeLocator  # noqa: PLC0415

    libc_path = next(
        line.split()[5] for line in open("/proc/self/maps") if line.split()[-1].endswith("/libc.so.6") and len(line.split()) >= 6
    )
    with open(libc_path, "rb") as handle:
        stub_vaddr, _size, stub_name = next(entry for entry in linkage_symbols(handle) if entry[2].endswith("@plt"))
    base = libc_mapping_base()
    locator = CodeLocator()
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker, locator=locator)
    symbolizer.start()
    qsort_r = libc_function_address("qsort_r")
    inner = None
    image = tracker.find(os.getpid(), time.monotonic_ns(), qsort_r).mapping.image
    vaddr = qsort_r - base
    for offset in range(0, 0x400):
        located = locator.locate(image.debug_handle() or image.handle, [vaddr + offset])[0]
        if located is not None and located.inlined:
            inner = qsort_r + offset
            break
    assert inner is not None
    symbolizer.submit(
        [RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (base + stub_vaddr + 2,), WalkEnd.COMPLETE, -1, True)]
    )
    symbolizer.submit([RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (inner,), WalkEnd.COMPLETE, -1, True)])
    symbolizer.finish()
    tracker.close()
    assert symbolizer.errors == []
    assert [frame.name for frame in profile.stack(profile.samples[0])] == [stub_name]
    chain = profile.stack(profile.samples[1])
    assert len(chain) >= 2 and not chain[0].inlined and all(frame.inlined for frame in chain[1:])
    assert chain[0].name in ("qsort_r", "__qsort_r") and chain[-1].line_exact and chain[-1].file.endswith(".c")


def named_through_the_helper(
    stacks: list[tuple[int, ...]], batched: bool, fresh_cache: bool = True, helpers_started: list[int] | None = None
) -> tuple[Profile, int]:
    """The stacks (this process's addresses, leaf first) named as one batch,
    with or without naming ahead; the profile and the requests it took.
    fresh_cache: none of what earlier runs were told by the helper;
    helpers_started: given, it gets how many helpers the naming started."""
    from profiler.native.locator_process import CodeLocator  # noqa: PLC0415

    if fresh_cache:
        os.environ["JITPROF_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=Path(os.environ["JITPROF_CACHE_DIR"]).parent)
    locator = CodeLocator()
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker, locator=locator)
    if not batched:
        symbolizer.elf.name_ahead = lambda wanted: None
    symbolizer.start()
    now = time.monotonic_ns()
    symbolizer.submit([RawSample(os.getpid(), os.getpid(), 0, now, "t", stack, WalkEnd.COMPLETE, -1, True) for stack in stacks])
    symbolizer.finish()
    tracker.close()
    locator.close()
    assert symbolizer.errors == []
    if helpers_started is not None:
        helpers_started.append(locator.helpers_started)
    return profile, symbolizer.elf.requests


def test_a_new_stack_s_native_callers_are_named_in_one_request_per_file():
    """Each request to blazesym's helper is a round trip (a fifth of a
    millisecond): a stack of 16 new libc callers costs the leaf's request and
    two for the callers (their functions, then the lines they begin on), and
    names every frame as naming them one at a time does."""
    names = ["qsort", "memcpy", "strlen", "malloc", "free", "printf", "fopen", "fclose", "getenv", "strtol", "abs",
             "strchr", "sprintf", "fwrite", "fread", "strcmp", "atoi"]  # fmt: skip
    addresses = tuple(libc_function_address(name) + 5 for name in names)
    frames = {}
    for batched in (True, False):
        profile, requests = named_through_the_helper([addresses], batched)
        frames[batched] = [(frame.name, frame.file, frame.line) for frame in profile.stack(profile.samples[0])]
        assert requests <= 4 if batched else requests >= 2 * (len(names) - 1), requests
    assert frames[True] == frames[False]
    assert sum(1 for name, _file, _line in frames[True] if name.lstrip("_").startswith(("qsort", "strlen", "malloc"))) >= 2


def test_what_the_helper_said_names_the_next_run_without_it():
    """Its answers are kept on disk by the file's key: the next run over the
    same addresses asks nothing and names them alike (lines, inlined
    functions); an address not seen before is asked for."""
    names = ["qsort", "memcpy", "strlen", "malloc", "free", "getenv"]
    addresses = tuple(libc_function_address(name) + 5 for name in names)
    started: list[int] = []
    first, first_requests = named_through_the_helper([addresses], batched=True, helpers_started=started)
    again, again_requests = named_through_the_helper([addresses], batched=True, fresh_cache=False, helpers_started=started)
    assert first_requests >= 1 and again_requests == 0
    assert started == [1, 0]  # nothing asked, no helper started
    shown = [
        [(frame.name, frame.file, frame.line, frame.inlined) for frame in profile.stack(profile.samples[0])]
        for profile in (first, again)
    ]
    assert shown[0] == shown[1]
    _more, more_requests = named_through_the_helper(
        [(libc_function_address("strtol") + 3, *addresses)], batched=True, fresh_cache=False
    )
    assert more_requests >= 1


def test_a_damaged_kept_answer_is_not_taken(tmp_path):
    """The kept answers are checked as the helper's are, each as it is asked
    for: an entry that is not one is not read at all, an answer that is not
    one is asked again (and replaced), and the others are taken."""
    from profiler.native import cache  # noqa: PLC0415
    from profiler.native.blazesym import NativeSymbol  # noqa: PLC0415
    from profiler.native.located_names import KIND, LocatedNames  # noqa: PLC0415

    for damaged in ({"addresses": [1, 2], "symbols": [None]}, [1, 2], {"addresses": ["1"], "symbols": [None]}):
        cache.write_json(KIND, "b-00ff", damaged)
        assert len(LocatedNames().known("b-00ff")) == 0
    good = ["f", 8, ["a.c", 3, 1], [["g", None, 2]]]
    cache.write_json(
        KIND, "b-00ff", {"addresses": [1, 2, 16], "symbols": [["f", -1, None, []], ["f", 1, ["a.c", "x", 1], []], good]}
    )
    located = LocatedNames()
    known = located.known("b-00ff")
    assert 1 not in known and 2 not in known and 99 not in known
    kept = known[16]
    assert kept is not None and kept.name == "f" and kept.place is not None and kept.place.line == 3
    assert kept.inlined[0].name == "g"
    located.add("b-00ff", {1: NativeSymbol("h", 1, None, ()), 16: None})  # 16 was known: kept as it was
    located.save()
    again = LocatedNames().known("b-00ff")
    assert len(again) == 2 and again[1] is not None and again[1].name == "h" and again[16] == kept


def test_a_batch_s_new_native_leaves_are_named_in_one_request_per_file():
    """A busy program's leaf is at a new instruction in most samples: the
    samples submitted together cost one request for their leaves (and one for
    the lines their functions begin on), not one or two each."""
    leaves = [libc_function_address(name) + 3 for name in ("qsort", "memcpy", "strlen", "malloc", "free", "getenv", "strtol")]
    named = {}
    for batched in (True, False):
        profile, requests = named_through_the_helper([(leaf,) for leaf in leaves], batched)
        named[batched] = [[frame.name for frame in profile.stack(sample)] for sample in profile.samples]
        assert requests <= 3 if batched else requests >= len(leaves), requests
    assert named[True] == named[False] and len(named[True]) == len(leaves)


def test_a_batch_s_new_stacks_share_their_requests():
    """A compiling JVM's stacks reach new native callers sample after sample:
    a batch of new stacks costs its requests per file, not a request or two
    per stack, and names each stack as naming them one at a time does."""
    names = ["qsort", "memcpy", "strlen", "malloc", "free", "printf", "fopen", "fclose", "getenv", "strtol", "abs", "strchr"]
    stacks = [tuple(libc_function_address(name) + 5 + offset for name in names[offset:] + names[:offset]) for offset in range(6)]
    named = {}
    for batched in (True, False):
        profile, requests = named_through_the_helper(stacks, batched)
        named[batched] = [[(frame.name, frame.line) for frame in profile.stack(sample)] for sample in profile.samples]
        assert requests <= 4 if batched else requests >= len(stacks) * (len(names) - 1), requests
    assert named[True] == named[False] and len(named[True]) == len(stacks)


def test_a_file_without_dwarf_is_named_from_its_symbol_table_without_the_helper(chain_binary, tmp_path):
    """blazesym would name such a file from its symbol table too, at a round
    trip per request: its names come from the table here, and no request goes."""
    stripped = tmp_path / "libdlwork-no-dwarf.so"
    subprocess.run(["objcopy", "--strip-debug", str(chain_binary.parent / "libdlwork.so"), str(stripped)], check=True)
    library = ctypes.CDLL(str(stripped))
    hot, entry = (ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in ("lib_hot", "lib_entry"))
    profile, requests = named_through_the_helper([(hot + 2, entry + 6), (entry + 3,)], batched=True)
    assert requests == 0
    named = [[(frame.name, frame.file, frame.kind) for frame in profile.stack(sample)] for sample in profile.samples]
    assert named == [
        [("lib_entry", "", FrameKind.NATIVE), ("lib_hot", "", FrameKind.NATIVE)],
        [("lib_entry", "", FrameKind.NATIVE)],
    ]


def test_async_callers_go_below_the_running_tasks_outermost_js_frame():
    """Past the task's JS the stack is V8's microtask runner (builtins, then
    native code): the functions awaiting the task sit between the two."""
    from profiler.model.profile import Frame

    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    symbolizer = Symbolizer(profile, tracker)
    try:

        def ids(*frames):
            return [profile.intern(frame) for frame in frames]

        main, run = ids(Frame("main", "node", FrameKind.NATIVE), Frame("RunMicrotasks", "node", FrameKind.NATIVE, tier="builtin"))
        closure = ids(Frame("AsyncFunctionAwaitResolveClosure", "node", FrameKind.NATIVE, tier="builtin"))
        parse, burn = ids(Frame("parseRow app.js:2", "[jit]", FrameKind.JIT), Frame("burn app.js:1", "[jit]", FrameKind.JIT))
        handler, load = ids(
            Frame("[async] handler app.js:4", "[jit]", FrameKind.ASYNC), Frame("[async] loadUser", "", FrameKind.ASYNC)
        )
        leaf = ids(Frame("Math.sqrt", "node", FrameKind.NATIVE, tier="builtin"))
        # leaf first: a builtin, burn, parseRow, the await's closure, the runner, main
        by_depth = [leaf, [burn], [parse], closure, [run], [main]]
        callers = symbolizer._with_async_callers(by_depth, (handler, load))
        assert callers == [main, run, *closure, handler, load, parse, burn]
        # The leaf itself is the task's outermost JS frame: they go right above it.
        assert symbolizer._with_async_callers([[parse], closure, [main]], (handler,)) == [main, *closure, handler]
        # No JS frame named: nowhere to put them.
        assert symbolizer._with_async_callers([leaf, [main]], (handler,)) == [main]
        # JS that called native code that ran the task: the task's JS ends at the native frame.
        outer_js = profile.intern(Frame("processTicksAndRejections", "[jit]", FrameKind.JIT))
        by_depth = [[burn], [parse], closure, [run], [main], [outer_js], [main]]
        assert symbolizer._with_async_callers(by_depth, (handler,)) == [main, outer_js, main, run, *closure, handler, parse]
    finally:
        tracker.close()


def _wait_until(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_samples_that_may_wait_are_named_once_their_process_may_wait_no_longer():
    """A spawned deno's samples are held while it runs (its names come from
    files that outlive it): named when its hold ends, or at the run's end, in
    full; another process's are named at once."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    held_pids = {os.getpid()}
    symbolizer.hold = lambda pid: pid in held_pids
    getpid, qsort = libc_function_address("getpid"), libc_function_address("qsort")

    def sample(pid):
        return RawSample(pid, pid, 0, time.monotonic_ns(), "t", (getpid + 1, qsort + 5), WalkEnd.COMPLETE, -1, True)

    symbolizer.start()
    try:
        symbolizer.submit([sample(os.getpid()) for _ in range(3)])
        assert _wait_until(lambda: symbolizer.backlog() == 3)
        time.sleep(0.2)  # several of its checks: still held
        assert len(profile.samples) == 0 and symbolizer.backlog() == 3
        held_pids.clear()  # it exited
        assert _wait_until(lambda: len(profile.samples) == 3)
        held_pids.add(os.getpid())
        symbolizer.submit([sample(os.getpid()) for _ in range(2)])
    finally:
        symbolizer.finish()  # the run's end names what still waits
        tracker.close()
    assert len(profile.samples) == 5 and symbolizer.errors == [] and symbolizer.given_up == 0
    assert {tuple(frame.name for frame in profile.stack(named)) for named in profile.samples} == {("qsort", "getpid")}


def test_a_held_process_whose_samples_carry_labels_is_named_while_it_runs():
    """A request's labels are read from the live process (a span's name and
    route): once a sample of a held process carries a context record, its
    held samples are named at once, in order, and its later ones as they
    come. The sources are told of what waits, to read what they can while
    it lives."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.hold = lambda pid: True
    marked: list[tuple[int, int]] = []

    class Marks(JitSymbolSource):
        def samples_held(self, pid: int, until_ns: int) -> None:
            marked.append((pid, until_ns))

    symbolizer.add_jit_source(Marks())
    getpid, qsort = libc_function_address("getpid"), libc_function_address("qsort")
    pid = os.getpid()

    def sample(time_ns, context=b""):
        raw = RawSample(pid, pid, 0, time_ns, "t", (getpid + 1, qsort + 5), WalkEnd.COMPLETE, -1, True)
        return dataclasses.replace(raw, thread_context=context)

    symbolizer.start()
    try:
        before = time.monotonic_ns()
        symbolizer.submit([sample(1), sample(2)])
        assert _wait_until(lambda: sum(map(len, symbolizer._held.values())) == 2 and bool(marked))
        assert len(profile.samples) == 0 and marked[0][0] == pid and marked[0][1] >= before
        symbolizer.submit([sample(3, b"\x05" * 8), sample(4)])
        assert _wait_until(lambda: len(profile.samples) == 4)
        symbolizer.submit([sample(5)])
        assert _wait_until(lambda: len(profile.samples) == 5)
        assert symbolizer.backlog() == 0
    finally:
        symbolizer.finish()
        tracker.close()
    assert [named.time_ns for named in profile.samples] == [1, 2, 3, 4, 5]
    assert len(marked) == 1 and symbolizer.errors == []


def test_the_native_frames_of_held_samples_are_named_while_they_wait():
    """What blazesym's helper names (its start, DWARF read for new functions)
    is asked as held samples come, beside the program: naming them once their
    process has exited asks it nothing more, and names them as at once."""
    from profiler.native.locator_process import CodeLocator  # noqa: PLC0415

    os.environ["JITPROF_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=Path(os.environ["JITPROF_CACHE_DIR"]).parent)
    names = ["qsort", "memcpy", "strlen", "malloc", "free", "printf", "fopen", "getenv"]
    stack = tuple(libc_function_address(name) + 5 for name in names)
    locator = CodeLocator()
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker, locator=locator)
    held_pids = {os.getpid()}
    symbolizer.hold = lambda pid: pid in held_pids
    pid = os.getpid()
    symbolizer.start()
    try:
        symbolizer.submit([RawSample(pid, pid, 0, time.monotonic_ns(), "t", stack, WalkEnd.COMPLETE, -1, True)])
        taken = threading.Event()
        symbolizer.call_in_order(taken.set)  # once the sample is taken in (and held)
        assert taken.wait(10)
        asked_while_held = symbolizer.elf.requests
        assert asked_while_held > 0 and len(profile.samples) == 0 and symbolizer.backlog() == 1
        held_pids.clear()  # it exited
        assert _wait_until(lambda: len(profile.samples) == 1)
    finally:
        symbolizer.finish()
        tracker.close()
        locator.close()
    assert symbolizer.errors == [] and symbolizer.elf.requests == asked_while_held
    live, _requests = named_through_the_helper([stack], batched=True)
    named = [(frame.name, frame.file, frame.line) for frame in profile.stack(profile.samples[0])]
    assert named == [(frame.name, frame.file, frame.line) for frame in live.stack(live.samples[0])]
    assert len(named) >= len(names) and all(name for name, _file, _line in named)


def test_held_samples_given_up_are_counted():
    """A run abandoned (the user insisted) while samples are held counts them
    with the rest it gave up: never dropped unseen."""
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.hold = lambda pid: True
    getpid, qsort = libc_function_address("getpid"), libc_function_address("qsort")

    def sample():
        pid = os.getpid()
        return RawSample(pid, pid, 0, time.monotonic_ns(), "t", (getpid + 1, qsort + 5), WalkEnd.COMPLETE, -1, True)

    symbolizer.start()
    try:
        symbolizer.submit([sample() for _ in range(3)])
        assert _wait_until(lambda: sum(map(len, symbolizer._held.values())) == 3)  # held, no longer queued
        symbolizer._abandoned.set()
        symbolizer.submit([sample() for _ in range(2)])
        assert _wait_until(lambda: symbolizer.given_up == 5)
    finally:
        symbolizer.finish()
        tracker.close()
    assert len(profile.samples) == 0 and symbolizer.given_up == 5


def test_a_hold_that_fails_names_its_samples_at_once():
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)

    def broken(pid):
        raise OSError("a cache file went away")

    symbolizer.hold = broken
    getpid, qsort = libc_function_address("getpid"), libc_function_address("qsort")
    pid = os.getpid()
    symbolizer.start()
    try:
        symbolizer.submit([RawSample(pid, pid, 0, time.monotonic_ns(), "t", (getpid + 1, qsort + 5), WalkEnd.COMPLETE, -1, True)])
        assert _wait_until(lambda: len(profile.samples) == 1)
    finally:
        symbolizer.finish()
        tracker.close()
    assert symbolizer.errors == ["OSError: a cache file went away"]
