"""JS frames mapped to their sources: the original file, lines and the
function names a minifier replaced, for frames of every kind V8 gives
(a function's start, an exact position, inlined, a script's top level),
and everything that must leave a frame as it was generated."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from profiler.jit.v8.names import js_display
from profiler.jit.v8.original_frames import OriginalFrames
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind
from tests.jit.v8.test_source_maps import encode

SCRIPT = '"use strict";function a(b){return b+1}var c=(d)=>a(d);c(1);\n//# sourceMappingURL=app.js.map\n'


def column(text: str, index_of: str, start: int = 0) -> int:
    """The 0-based column of a piece of the script's first line."""
    return SCRIPT.index(index_of, start)


FUNCTION_A = column(SCRIPT, "a(")
PAREN_A = FUNCTION_A + 1
NAME_C = column(SCRIPT, "c=")
ARROW = column(SCRIPT, "(d)")
CALL_C = column(SCRIPT, "c(1)")
BODY_A = column(SCRIPT, "b+1")


def write_app(directory: Path, mappings: str | None = None) -> str:
    """dist/app.js and its map; the sources are ../src/app.ts."""
    dist = directory / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "app.js").write_text(SCRIPT)
    lines = [
        [
            (13, 0, 0, 0),  # function
            (FUNCTION_A, 0, 0, 9, 0),  # a -> add
            (PAREN_A, 0, 0, 12),
            (NAME_C, 0, 4, 6, 1),  # c -> increment
            (ARROW, 0, 4, 18),
            (CALL_C, 0, 6, 0),
        ]
    ]
    document = {"version": 3, "sources": ["../src/app.ts"], "names": ["add", "increment"], "mappings": mappings or encode(lines)}
    (dist / "app.js.map").write_text(json.dumps(document))
    return str(dist / "app.js")


def generated(script: str, name: str, start: int, at: int | None = None, inlined: bool = False) -> Frame:
    """A frame as V8's structures name it (columns 1-based)."""
    return Frame(
        js_display(name, script, 1),
        JIT_MODULE,
        FrameKind.JIT,
        script,
        1,
        (at if at is not None else start) + 1,
        "turbofan",
        inlined,
        at is not None,
        1,
        start + 1,
    )


def mapped(frames: list[Frame]) -> OriginalFrames:
    originals = OriginalFrames()
    originals.note_frames(os.getpid(), frames)
    originals.start()
    assert originals.wait_idle(10.0)
    originals.close()
    return originals


def test_minified_functions_get_their_names_files_and_lines_back(tmp_path: Path):
    script = write_app(tmp_path)
    add = generated(script, "a", PAREN_A)
    increment = generated(script, "c", ARROW)
    originals = mapped([add, increment]).originals
    source = str(tmp_path / "src" / "app.ts")
    assert originals[add] == dataclasses.replace(
        add, name="add app.ts:1", file=source, line=1, column=13, function_line=1, function_column=13
    )
    assert originals[increment].name == "increment app.ts:5"
    assert (originals[increment].function_line, originals[increment].function_column) == (5, 19)


def test_a_process_noted_while_there_has_its_frames_mapped_after_it_exited(tmp_path: Path):
    """On a slow machine the symbolizer comes to a short process's frames
    after it exited: it was noted when followed, and its frames are mapped."""
    script = write_app(tmp_path)
    add = generated(script, "a", PAREN_A)
    child = subprocess.Popen(["sleep", "30"])
    originals = OriginalFrames()
    originals.note_process(child.pid)
    child.kill()
    child.wait()
    originals.note_frames(child.pid, [add])
    originals.start()
    assert originals.wait_idle(10.0)
    originals.close()
    assert originals.originals[add].name == "add app.ts:1"
    unnoted = OriginalFrames()  # not noted while there: its frames stay as generated
    unnoted.note_frames(child.pid, [add])
    unnoted.start()
    assert unnoted.wait_idle(10.0)
    unnoted.close()
    assert add not in unnoted.originals


def test_an_exact_position_and_an_inlined_frame_map_to_where_they_were(tmp_path: Path):
    script = write_app(tmp_path)
    inside = generated(script, "a", PAREN_A, at=BODY_A, inlined=True)
    original = mapped([inside]).originals[inside]
    assert original.inlined and original.line_exact
    assert (original.name, original.line, original.column) == ("add app.ts:1", 1, 13)  # the segment before the body


def test_an_async_caller_maps_as_its_js_frame_does_and_stays_one(tmp_path: Path):
    script = write_app(tmp_path)
    frame = generated(script, "c", ARROW, at=CALL_C)
    waiting = dataclasses.replace(frame, name="[async] " + frame.name, kind=FrameKind.ASYNC, tier="")
    originals = mapped([frame, waiting]).originals
    assert originals[waiting] == dataclasses.replace(
        originals[frame], name="[async] increment app.ts:5", kind=FrameKind.ASYNC, tier=""
    )


def test_a_script_s_top_level_is_its_source_s(tmp_path: Path):
    script = write_app(tmp_path)
    top = generated(script, "", 0, at=CALL_C)
    original = mapped([top]).originals[top]
    assert (original.name, original.line, original.function_line) == ("(anonymous) app.ts:1", 7, 1)


def test_a_name_the_map_does_not_give_at_the_function_stays(tmp_path: Path):
    script = write_app(tmp_path)
    # V8 may call a function by a name written elsewhere (b is a parameter): no segment begins at one before it.
    renamed = generated(script, "zz", PAREN_A)
    assert mapped([renamed]).originals[renamed].name == "zz app.ts:1"


def test_frames_without_a_map_or_outside_it_stay_as_generated(tmp_path: Path):
    script = write_app(tmp_path)
    (tmp_path / "plain.js").write_text("function f(){}\n")
    plain = generated(str(tmp_path / "plain.js"), "f", 10)
    native = Frame("malloc", "libc.so.6", FrameKind.NATIVE)
    builtin = Frame("[builtin] ArrayPush", JIT_MODULE, FrameKind.JIT, tier="builtin")
    before_any_segment = generated(script, "", 5)  # inside "use strict": no segment yet, not a top level
    originals = mapped([plain, native, builtin, before_any_segment, generated("node:fs", "readFile", 3)])
    assert originals.originals == {}
    assert originals.stats.with_maps == 1


def test_a_malformed_map_is_skipped_with_one_line(tmp_path: Path):
    script = write_app(tmp_path, mappings="!!!")
    frames = [generated(script, "a", PAREN_A), generated(script, "c", ARROW)]
    originals = mapped(frames)
    assert originals.originals == {}
    assert originals.problems == ["the source map of app.js is skipped: its mappings are malformed"]


def test_a_map_that_is_not_json_is_skipped_with_one_line(tmp_path: Path):
    script = write_app(tmp_path)
    (tmp_path / "dist" / "app.js.map").write_text("<html>not found</html>")
    originals = mapped([generated(script, "a", PAREN_A)])
    assert originals.originals == {}
    assert originals.problems == ["the source map of app.js is skipped: it is not JSON"]


def test_a_frame_is_looked_at_once_however_often_it_is_noted(tmp_path: Path):
    script = write_app(tmp_path)
    add = generated(script, "a", PAREN_A)
    originals = OriginalFrames()
    for _ in range(3):
        originals.note_frames(os.getpid(), [add])
    originals.start()
    assert originals.wait_idle(10.0)
    originals.note_frames(os.getpid(), [add])
    assert originals.wait_idle(10.0)
    originals.close()
    assert originals.stats.frames_mapped == 1 and originals.stats.maps_read == 1


def test_a_dropped_map_leaves_nothing_behind_when_scripts_and_maps_are_evicted(tmp_path: Path, monkeypatch):
    from profiler.jit.v8 import original_frames

    monkeypatch.setattr(original_frames, "MAX_SCRIPTS", 1)  # every new script evicts those without a map
    monkeypatch.setattr(original_frames, "MAX_PARSED_MAP_BYTES", 1)  # every parsed map evicts the older ones
    broken = write_app(tmp_path / "broken", mappings="AAAA,!!!")  # parses, fails when asked
    good = [write_app(tmp_path / name) for name in ("first", "second")]
    originals = OriginalFrames()
    for script in (broken, *good):  # one pass each, in this order
        frame = generated(script, "a", PAREN_A)
        originals.note_frames(os.getpid(), [frame])
        originals.map_frames([(os.getpid(), frame)])
    assert originals.problems == ["the source map of app.js is skipped: its mappings are malformed"]
    assert sorted(original.file for original in originals.originals.values()) == [
        str(tmp_path / name / "src" / "app.ts") for name in ("first", "second")
    ]
    originals.close()


def test_the_end_of_a_run_does_not_wait_for_maps_once_the_user_insists(tmp_path: Path, monkeypatch):
    script = write_app(tmp_path)
    originals = OriginalFrames()
    released = threading.Event()
    monkeypatch.setattr(originals, "map_frames", lambda noted: released.wait(60))  # a map that takes long
    originals.note_frames(os.getpid(), [generated(script, "a", PAREN_A)])
    originals.start()
    insisted = threading.Event()
    threading.Timer(0.2, insisted.set).start()
    started = time.monotonic()
    originals.finish(30.0, abandon=insisted.is_set)  # returns once insisted, not after 30 s or 60
    assert time.monotonic() - started < 10.0
    assert insisted.is_set() and originals._thread.is_alive()
    released.set()
    originals.close()
