"""Finding a script's source map among a target's files: the last
sourceMappingURL comment, a map beside the script or in a data: URL, and
the files a target could use against root refused."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from profiler.jit.v8.source_map_files import (
    MAX_MAP_BYTES,
    TAIL_BYTES,
    SourceMapUnavailable,
    TargetUser,
    decode_data_url,
    find_source_map,
    script_path,
)

ME = TargetUser(os.getuid(), frozenset([os.getgid()]))
MAP = b'{"version":3,"sources":["a.ts"],"names":[],"mappings":"AAAA"}'


def write(path: Path, text: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return str(path)


def test_a_map_beside_the_script_is_found_and_read(tmp_path: Path):
    script = write(tmp_path / "dist" / "app.js", b"function a(){}\n//# sourceMappingURL=app.js.map\n")
    write(tmp_path / "dist" / "app.js.map", MAP)
    files = find_source_map("/", script, ME)
    assert files is not None
    try:
        assert files.map_text() == MAP
        assert files.base == str(tmp_path / "dist")
        assert files.script_text().startswith(b"function a")
    finally:
        files.close()


def test_the_last_comment_counts_and_one_inside_code_does_not(tmp_path: Path):
    text = (
        b"//# sourceMappingURL=old.map\n"
        b'const s = "sourceMappingURL=in-a-string.map";\n'
        b"//@ sourceMappingURL=sub/new.map\n"
        b'x("sourceMappingURL=after.map")\n'
    )
    script = write(tmp_path / "app.js", text)
    write(tmp_path / "sub" / "new.map", MAP)
    files = find_source_map("/", script, ME)
    assert files is not None and files.source_map is not None
    assert files.base == str(tmp_path / "sub")
    files.close()


def test_a_script_without_a_comment_has_no_map(tmp_path: Path):
    script = write(tmp_path / "plain.js", b"x();\n" * 50_000)  # larger than the tail read
    assert find_source_map("/", script, ME) is None


@pytest.mark.parametrize("encoding", ["base64", "percent"])
def test_an_inline_map_longer_than_the_tail_is_read_from_its_data_url(tmp_path: Path, encoding: str):
    names = ",".join(f'"n{index}"' for index in range(20_000))
    document = b'{"version":3,"sources":["a.ts"],"names":[' + names.encode() + b'],"mappings":"AAAA"}'
    assert len(document) > TAIL_BYTES
    if encoding == "base64":
        url = b"data:application/json;charset=utf-8;base64," + base64.b64encode(document)
    else:
        url = b"data:application/json," + urllib.parse.quote_from_bytes(document).encode()
    script = write(tmp_path / "bundle.js", b"var a=1;//# sourceMappingURL=" + url)  # one line, no newline
    files = find_source_map("/", script, ME)
    assert files is not None and files.source_map is None
    assert files.map_text() == document
    files.close()


def test_a_malformed_data_url_is_unavailable():
    with pytest.raises(SourceMapUnavailable):
        decode_data_url(b"data:application/json;base64,@@@")
    with pytest.raises(SourceMapUnavailable):
        decode_data_url(b"data:no-comma")


def test_a_map_on_a_server_is_not_fetched(tmp_path: Path):
    script = write(tmp_path / "app.js", b"//# sourceMappingURL=https://cdn.example/app.js.map\n")
    with pytest.raises(SourceMapUnavailable, match="not fetched"):
        find_source_map("/", script, ME)


def test_a_symlink_on_the_way_to_the_map_is_not_followed(tmp_path: Path):
    secret = write(tmp_path / "secret" / "real.map", MAP)
    script = write(tmp_path / "app.js", b"//# sourceMappingURL=app.js.map\n")
    os.symlink(secret, tmp_path / "app.js.map")
    with pytest.raises(SourceMapUnavailable, match="symbolic link"):
        find_source_map("/", script, ME)


STRANGER = TargetUser(os.getuid() + 4242, frozenset([os.getgid() + 4242]))


@pytest.fixture
def open_dir():
    """A directory anyone may pass through (pytest's own are 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="jitprof-maps-"))
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_map_the_target_user_may_not_read_is_refused(open_dir: Path):
    script = write(open_dir / "app.js", b"//# sourceMappingURL=app.js.map\n")
    os.chmod(write(open_dir / "app.js.map", MAP), 0o600)
    os.chmod(script, 0o644)
    with pytest.raises(SourceMapUnavailable, match="may not read"):
        find_source_map("/", script, STRANGER)


def test_a_readable_map_in_a_directory_the_target_user_may_not_enter_is_refused(open_dir: Path):
    """A 0644 map inside root's 0700 directory: the target's user gets EACCES
    from cat, so root must not read it for them (its names and paths reached
    every output)."""
    script = write(open_dir / "app.js", b"//# sourceMappingURL=private/app.js.map\n")
    os.chmod(script, 0o644)
    secret = write(open_dir / "private" / "app.js.map", MAP)
    os.chmod(secret, 0o644)
    os.chmod(open_dir / "private", 0o700)
    with pytest.raises(SourceMapUnavailable, match="may not reach"):
        find_source_map("/", script, STRANGER)
    os.chmod(open_dir / "private", 0o711)  # searchable, not listable: reachable, as the kernel decides
    found = find_source_map("/", script, STRANGER)
    assert found is not None and found.map_text() == MAP
    found.close()


def test_a_script_the_target_user_may_not_reach_is_not_opened(open_dir: Path):
    script = write(open_dir / "private" / "app.js", b"//# sourceMappingURL=app.js.map\n")
    write(open_dir / "private" / "app.js.map", MAP)
    os.chmod(open_dir / "private", 0o700)
    with pytest.raises(PermissionError):
        find_source_map("/", script, STRANGER)


def test_a_map_over_the_size_cap_is_refused(tmp_path: Path):
    script = write(tmp_path / "app.js", b"//# sourceMappingURL=big.map\n")
    with open(tmp_path / "big.map", "wb") as handle:
        handle.truncate(MAX_MAP_BYTES + 1)  # sparse: no disk needed
    with pytest.raises(SourceMapUnavailable):
        find_source_map("/", script, ME)


def test_a_fifo_in_place_of_the_map_does_not_block(tmp_path: Path):
    script = write(tmp_path / "app.js", b"//# sourceMappingURL=app.js.map\n")
    os.mkfifo(tmp_path / "app.js.map")
    with pytest.raises(SourceMapUnavailable, match="not a regular file"):
        find_source_map("/", script, ME)


def test_only_scripts_that_are_files_have_maps():
    assert script_path("/srv/app/dist/index.js") == "/srv/app/dist/index.js"
    assert script_path("file:///srv/my%20app/index.mjs") == "/srv/my app/index.mjs"
    assert script_path("node:internal/main/run_main_module") is None
    assert script_path("evalmachine.<anonymous>") is None
    assert script_path("https://example.com/app.js") is None


def test_a_comment_naming_a_map_that_is_not_there_is_no_map(tmp_path: Path):
    # npm packages (typescript's lib/_tsc.js) keep the comment and leave the map out.
    script = write(tmp_path / "_tsc.js", b"run();\n//# sourceMappingURL=_tsc.js.map\n")
    assert find_source_map("/", script, ME) is None
