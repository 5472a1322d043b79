"""The kept BPF object: what is read back from the cache goes into the
kernel, so anything but exactly what was stored is refused."""

import base64
import json

from profiler.kernel import bpf_object
from profiler.kernel.bpf_object import BpfObject, MapSpec, ProgramSpec
from profiler.kernel.bpf_program import BPF_DIRECTORY, program_text
from profiler.native import cache


def sample_object() -> BpfObject:
    # r1 = map fd (ld_imm64, two slots), exit
    code = bytes([0x18, 0x11, 0, 0, 0, 0, 0, 0]) + bytes(8) + bytes([0x95, 0, 0, 0, 0, 0, 0, 0])
    return BpfObject(
        (MapSpec("followed", 1, 4, 1, 16384, 0),),
        (ProgramSpec("on_cpu_sample", bpf_object.PROG_TYPE_PERF_EVENT, code, ((0, "followed"),)),),
        "GPL",
        0,
    )


def test_round_trip():
    bpf_object.store("b-aa", sample_object())
    assert bpf_object.load_cached("b-aa") == sample_object()


def tamper(key: str, change) -> None:
    path = bpf_object.cache_path_for(key)
    document = json.loads(path.read_bytes())
    change(document)
    path.write_text(json.dumps(document))


def test_a_reference_outside_the_program_or_to_no_map_is_refused():
    bpf_object.store("b-ab", sample_object())
    tamper("b-ab", lambda document: document["programs"][0].__setitem__("map_references", [[2, "followed"]]))
    assert bpf_object.load_cached("b-ab") is None
    bpf_object.store("b-ac", sample_object())
    tamper("b-ac", lambda document: document["programs"][0].__setitem__("map_references", [[0, "elsewhere"]]))
    assert bpf_object.load_cached("b-ac") is None


def test_damaged_entries_are_refused():
    bpf_object.store("b-ad", sample_object())
    tamper("b-ad", lambda document: document["programs"][0].__setitem__("instructions", base64.b64encode(b"123").decode()))
    assert bpf_object.load_cached("b-ad") is None
    bpf_object.store("b-ae", sample_object())
    tamper("b-ae", lambda document: document.__setitem__("format", 99))
    assert bpf_object.load_cached("b-ae") is None
    path = cache.entry_path("bpf", "b-af", ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert bpf_object.load_cached("b-af") is None


def test_the_key_depends_on_source_and_flags():
    assert bpf_object.object_key(b"a", ["-DX=1"]) != bpf_object.object_key(b"a", ["-DX=2"])
    assert bpf_object.object_key(b"a", ["-DX=1"]) != bpf_object.object_key(b"b", ["-DX=1"])


def test_the_cache_key_reads_bcc_version_without_loading_bcc():
    """Importing bcc maps LLVM and clang (about 100 MiB) for the whole run."""
    import subprocess
    import sys

    code = "import sys; from profiler.kernel import bpf_object; print(bpf_object.bcc_version(), 'bcc' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, imported = result.stdout.split()
    assert imported == "False"
    assert version[0].isdigit() or version == "?"


def test_the_program_text_holds_each_part_once_in_place():
    """BCC compiles one text: every bpf/*.bpf.h part is put in where the
    program includes it, once, and the compiler's lines name its file."""
    text = program_text().decode()
    parts = sorted(path.name for path in BPF_DIRECTORY.glob("*.bpf.h"))
    assert parts
    assert '.bpf.h"' not in "\n".join(line for line in text.splitlines() if line.startswith("#include"))
    for part in parts:
        assert text.count(f'#line 1 "{part}"') == 1, part
    assert "int on_cpu_sample(" in text and "RAW_TRACEPOINT_PROBE(sched_switch)" in text


def test_a_load_interrupted_by_signals_is_said_so_not_called_a_bug():
    """The verifier gives up when signals keep coming (a debugger or a
    profiler stopping jitprof): the user is told that, not that the program
    is at fault, and a refused program is still told as refused."""
    import errno

    from profiler.kernel.bpf_program import _explain_load_failure

    interrupted = bpf_object.BpfLoadError("loading BPF program walk_user_stack was interrupted by signals, 6 times", errno.EAGAIN)
    assert interrupted.interrupted and not interrupted.out_of_resources
    told = _explain_load_failure(interrupted)
    assert "interrupted by signals" in told.message and "walk_user_stack" in told.message
    assert "jitprof bug" not in told.render() and "py-spy" in told.render()
    refused = _explain_load_failure(bpf_object.BpfLoadError("failed to load BPF program x: R1 invalid mem access", errno.EACCES))
    assert not bpf_object.BpfLoadError("x", errno.EACCES).interrupted
    assert "rejected" in refused.message and "jitprof bug" in refused.render()
