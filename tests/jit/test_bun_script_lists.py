"""A bun command's list of scripts, kept across runs: taken again only
while every script on it reads as it did, as the target's user."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from profiler.jit.bun import script_lists
from profiler.jit.v8.source_map_files import TargetUser
from profiler.native import cache

TRANSPILER = Path(__file__)
OWNER = TargetUser(0, frozenset([0]))
STRANGER = TargetUser(54321, frozenset([54321]))


def kept_list(tmp_path: Path, texts: dict[str, str]) -> str:
    (tmp_path / "app").mkdir()
    for name, text in texts.items():
        (tmp_path / "app" / name).write_text(text)
    key = script_lists.key_of(str(tmp_path), ["main.js"], (0, 0), TRANSPILER, "1.0")
    entries = [script_lists.listed(str(tmp_path / "app" / name), text) for name, text in texts.items()]
    assert all(entry is not None for entry in entries)
    assert script_lists.store(key, [entry for entry in entries if entry is not None], time.time_ns() + 10**9)
    return key


def test_an_unchanged_list_gives_its_scripts_texts_read_again(tmp_path):
    key = kept_list(tmp_path, {"main.js": "require('./lib')\n", "lib.js": "module.exports = 1\n"})
    assert script_lists.load(key, OWNER, 10, 1 << 20) == [
        (str(tmp_path / "app" / "main.js"), "require('./lib')\n"),
        (str(tmp_path / "app" / "lib.js"), "module.exports = 1\n"),
    ]


def test_the_key_is_the_command_s_directory_arguments_and_user():
    keys = {
        script_lists.key_of("/srv", ["main.js"], (0, 0), TRANSPILER, "1.0"),
        script_lists.key_of("/srv", ["main.js", "x"], (0, 0), TRANSPILER, "1.0"),
        script_lists.key_of("/srv/a", ["main.js"], (0, 0), TRANSPILER, "1.0"),
        script_lists.key_of("/srv", ["main.js"], (1000, 0), TRANSPILER, "1.0"),
        script_lists.key_of("/srv", ["main.js"], (0, 0), TRANSPILER, "1.1"),
        # The parts are separated: "a" "bc" is not "ab" "c".
        script_lists.key_of("/srv", ["a", "bc"], (0, 0), TRANSPILER, "1.0"),
        script_lists.key_of("/srv", ["ab", "c"], (0, 0), TRANSPILER, "1.0"),
    }
    assert len(keys) == 7


@pytest.mark.parametrize(
    "change",
    ["text", "new file beside", "removed", "link", "unreadable by the user", "over the cap"],
)
def test_any_change_to_a_listed_script_or_its_directory_is_a_miss(tmp_path, change):
    key = kept_list(tmp_path, {"main.js": "require('./lib')\n", "lib.js": "module.exports = 1\n"})
    reader, cap = OWNER, 1 << 20
    assert script_lists.load(key, reader, 10, cap) is not None
    app = tmp_path / "app"
    lib = app / "lib.js"
    before = app.stat()
    if change == "text":
        # The same size and directory: only the text tells.
        lib.write_text("module.exports = 2\n")
    elif change == "new file beside":
        (app / "lib.ts").write_text("export default 1\n")
    elif change == "removed":
        lib.unlink()
    elif change == "link":
        lib.rename(tmp_path / "elsewhere.js")
        lib.symlink_to(tmp_path / "elsewhere.js")
        # The directory's time put back: the link alone must tell.
        os.utime(app, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "unreadable by the user":
        lib.chmod(0o600)
        reader = STRANGER
    else:
        cap = len("require('./lib')\n") + 3
    assert script_lists.load(key, reader, 10, cap) is None


@pytest.mark.parametrize(
    "entry",
    [
        {"not": "a list"},
        [],
        [["relative.js", "0" * 64, 0]],
        [["/etc/passwd", "0" * 64]],
        [["/etc/passwd", 5, 0]],
        [["/etc/passwd", "0" * 64, "0"]],
        [["/x.js", "0" * 64, 0]] * 11,
    ],
)
def test_a_damaged_entry_is_a_miss(tmp_path, entry):
    key = script_lists.key_of(str(tmp_path), ["main.js"], (0, 0), TRANSPILER, "1.0")
    cache.write_json(script_lists.KIND, key, entry)
    assert script_lists.load(key, OWNER, 10, 1 << 20) is None


def test_a_text_not_utf8_is_a_miss(tmp_path):
    """A lone surrogate in what bun answered hashes as these bytes, which are no UTF-8: the hash alone would not tell."""
    (tmp_path / "app").mkdir()
    script = tmp_path / "app" / "main.js"
    script.write_bytes(b"x = '\xed\xb3\xbf'\n")
    key = script_lists.key_of(str(tmp_path), ["main.js"], (0, 0), TRANSPILER, "1.0")
    entry = script_lists.listed(str(script), "x = '\udcff'\n")
    assert entry is not None
    assert script_lists.store(key, [entry], time.time_ns() + 10**9)
    assert script_lists.load(key, OWNER, 10, 1 << 20) is None


def test_a_list_whose_directory_changed_while_it_was_searched_is_not_kept(tmp_path):
    """A file added beside the scripts while bun searched may be missing
    from what it found: the next run searches again."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.js").write_text("x\n")
    searched_since = time.time_ns()
    (tmp_path / "app" / "util.ts").write_text("y\n")  # during the search
    entry = script_lists.listed(str(tmp_path / "app" / "main.js"), "x\n")
    assert entry is not None
    key = script_lists.key_of(str(tmp_path), ["main.js"], (0, 0), TRANSPILER, "1.0")
    assert not script_lists.store(key, [entry], searched_since)
    assert script_lists.load(key, OWNER, 10, 1 << 20) is None
