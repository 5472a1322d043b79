import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from profiler.model.profile import Frame, FrameKind
from profiler.output import OutputRequest, UnknownFormat, format_for, write_outputs
from profiler.output.folded import parse_folded_line, write_folded
from profiler.output.svg import write_svg
from tests.helpers import kernel, make_profile, native

SVG_NS = {"svg": "http://www.w3.org/2000/svg"}


def sample_profile(**kwargs):
    main, a, b, c = (native(name) for name in ("main", "a", "b", "c"))
    return make_profile(
        [
            ("prog", 10, [main, a, b, c], 90),
            ("prog", 10, [main, a, native("other")], 6),
            ("prog", 10, [main, a, b, c, kernel("do_syscall_64")], 3),
            ("child", 11, [main, Frame("[unknown] (libx.so)", "libx.so", FrameKind.UNKNOWN)], 1),
        ],
        **kwargs,
    )


def test_folded_lines_and_counts():
    buffer = io.StringIO()
    write_folded(sample_profile(), buffer)
    lines = buffer.getvalue().splitlines()
    assert lines == sorted(lines)
    assert "prog;main;a;b;c 90" in lines
    assert "prog;main;a;other 6" in lines
    assert "prog;main;a;b;c;do_syscall_64_[k] 3" in lines
    assert "child;main;[unknown] (libx.so) 1" in lines
    assert sum(parse_folded_line(line).count for line in lines) == 100


def test_folded_by_pid_and_escaping():
    profile = make_profile([("a;b", 7, [native("x;y"), native("new\nline")], 2)], root_by_pid=True)
    buffer = io.StringIO()
    write_folded(profile, buffer)
    assert buffer.getvalue() == "a:b-7;x:y;new\\x0aline 2\n"  # a line break is shown, never written


def test_svg_is_valid_xml_with_nested_frames():
    buffer = io.StringIO()
    write_svg(sample_profile(), buffer)
    root = ET.fromstring(buffer.getvalue())
    frames = root.find("svg:svg[@id='frames']", SVG_NS)
    assert frames.get("total_samples") == "100"
    boxes = {}
    for group in frames.findall("svg:g", SVG_NS):
        title = group.find("svg:title", SVG_NS).text
        rect = group.find("svg:rect", SVG_NS)
        name = title.split(" [")[0].split(" (")[0]
        boxes.setdefault(name, []).append(
            (
                int(rect.get("{http://github.com/jonhoo/inferno}x")),
                int(rect.get("{http://github.com/jonhoo/inferno}w")),
                float(rect.get("y")),
                title,
            )
        )
    (c_box,) = boxes["c"]
    (b_box,) = boxes["b"]
    assert c_box[1] == 93 and b_box[1] == 93
    assert c_box[2] < b_box[2]  # callee drawn above caller
    assert b_box[0] <= c_box[0] < b_box[0] + b_box[1]
    assert "93 samples, 93.00%" in c_box[3] and "native" in c_box[3]
    assert root.find("svg:text[@id='search']", SVG_NS) is not None
    assert "function zoom(" in root.find("svg:script", SVG_NS).text


def test_svg_escapes_names():
    profile = make_profile([("p", 1, [native("operator<<(a&b)")], 1)])
    buffer = io.StringIO()
    write_svg(profile, buffer)
    ET.fromstring(buffer.getvalue())
    assert "operator&lt;&lt;(a&amp;b)" in buffer.getvalue()


def test_format_from_extension():
    assert format_for(Path("x.svg"), None) == "svg"
    assert format_for(Path("x.folded"), None) == "folded"
    assert format_for(Path("x.txt"), None) == "folded"
    assert format_for(Path("x.data"), "folded") == "folded"
    with pytest.raises(UnknownFormat):
        format_for(Path("x.data"), None)
    with pytest.raises(UnknownFormat):
        format_for(Path("x.svg"), "png")


def test_unwritable_path_falls_back_and_keeps_the_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "missing-dir" / "out.folded"
    (written,) = write_outputs(sample_profile(), [OutputRequest(target, "folded")], None)
    assert written.error and written.written is not None and written.written != target
    assert "prog;main;a;b;c 90" in written.written.read_text()


def test_symlink_at_output_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    link = tmp_path / "out.folded"
    link.symlink_to(victim)
    (written,) = write_outputs(sample_profile(), [OutputRequest(link, "folded")], None)
    assert victim.read_text() == "keep me"
    assert written.error and written.written != link
    written.written.unlink()


def test_svg_merges_one_function_in_several_tiers():
    interpreted = Frame("handle app.js:3", "[jit]", FrameKind.JIT, "/srv/app.js", 3, 1, "interpreted")
    optimised = Frame("handle app.js:3", "[jit]", FrameKind.JIT, "/srv/app.js", 3, 1, "turbofan")
    profile = make_profile([("node", 1, [native("main"), interpreted], 2), ("node", 1, [native("main"), optimised], 3)])
    buffer = io.StringIO()
    write_svg(profile, buffer)
    root = ET.fromstring(buffer.getvalue())
    titles = [group.find("svg:title", SVG_NS).text for group in root.iter("{http://www.w3.org/2000/svg}g")]
    assert sum(title.startswith("handle app.js:3") for title in titles) == 1
    assert any("handle app.js:3" in title and "5 samples" in title for title in titles)
