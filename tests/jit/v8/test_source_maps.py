"""Source maps: the native lookup against a plain reference decoder, maps
as tsc and bundlers write them (index maps too), and malformed maps."""

from __future__ import annotations

import json
import random

import pytest

from profiler.jit.v8.source_maps import Original, SourceMapError, parse_source_map

BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def vlq(value: int) -> str:
    number = (-value << 1) | 1 if value < 0 else value << 1
    text = ""
    while True:
        digit, number = number & 31, number >> 5
        text += BASE64[digit | (32 if number else 0)]
        if not number:
            return text


def encode(lines: list[list[tuple[int, ...]]]) -> str:
    """Segments (column, source, line, column[, name]) with absolute values, as a mappings string."""
    state = [0, 0, 0, 0]
    out = []
    for segments in lines:
        column = 0
        parts = []
        for segment in segments:
            text = vlq(segment[0] - column)
            column = segment[0]
            for field, value in enumerate(segment[1:]):
                text += vlq(value - state[field])
                state[field] = value
            parts.append(text)
        out.append(",".join(parts))
    return ";".join(out)


def reference(lines: list[list[tuple[int, ...]]], sources, names, line: int, column: int) -> Original | None:  # noqa: ANN001
    """The plain reading: the last segment at or before the column, on its line."""
    if line - 1 >= len(lines):
        return None
    found = None
    for segment in lines[line - 1]:
        if segment[0] <= column - 1:
            found = segment
    if found is None or len(found) == 1:
        return None
    name = names[found[4]] if len(found) == 5 else None
    return Original(sources[found[1]], found[2] + 1, found[3] + 1, name, found[0] + 1)


def random_map(seed: int) -> tuple[list[list[tuple[int, ...]]], list[str], list[str]]:
    generator = random.Random(seed)
    sources, names = [f"src/{index}.ts" for index in range(4)], [f"name{index}" for index in range(6)]
    lines = []
    for _line in range(generator.randint(0, 30)):
        columns = sorted(generator.sample(range(200), generator.randint(0, 12)))
        segments = []
        for column in columns:
            kind = generator.choice((1, 4, 4, 5))
            segment = (
                (column,) if kind == 1 else (column, generator.randrange(4), generator.randrange(400), generator.randrange(120))
            )
            segments.append(segment + ((generator.randrange(6),) if kind == 5 else ()))
        lines.append(segments)
    return lines, sources, names


@pytest.mark.parametrize("seed", range(40))
def test_lookups_agree_with_the_plain_reading(seed):
    lines, sources, names = random_map(seed)
    text = json.dumps({"version": 3, "sources": sources, "names": names, "mappings": encode(lines)})
    source_map = parse_source_map(text)
    generator = random.Random(seed + 1000)
    positions = [(generator.randint(1, len(lines) + 2), generator.randint(1, 210)) for _ in range(300)]
    assert source_map.originals(positions) == [reference(lines, sources, names, line, column) for line, column in positions]


def test_sources_are_joined_to_the_root_and_the_maps_place():
    text = json.dumps(
        {
            "version": 3,
            "sourceRoot": "../src",
            "sources": ["a.ts", "/abs/b.ts", "webpack://app/c.ts"],
            "names": [],
            "mappings": "AAAA,CCAA,CCAA",
        }
    )
    found = parse_source_map(text, "/home/me/app/dist").originals([(1, 1), (1, 2), (1, 3)])
    assert [original.source for original in found if original] == ["/home/me/app/src/a.ts", "/abs/b.ts", "webpack://app/c.ts"]


def test_an_index_map_sends_each_position_to_its_section():
    first = {"version": 3, "sources": ["a.ts"], "names": ["alpha"], "mappings": "AAAAA"}
    second = {"version": 3, "sources": ["b.ts"], "names": ["beta"], "mappings": "AAEEA;AACA"}
    text = json.dumps(
        {
            "version": 3,
            "sections": [
                {"offset": {"line": 0, "column": 0}, "map": first},
                {"offset": {"line": 0, "column": 20}, "map": second},
            ],
        }
    )
    found = parse_source_map(text).originals([(1, 5), (1, 21), (1, 30), (2, 1)])
    assert found == [
        Original("a.ts", 1, 1, "alpha", 1),
        Original("b.ts", 3, 3, "beta", 21),  # where the segment begins, in the script's columns
        Original("b.ts", 3, 3, "beta", 21),
        Original("b.ts", 4, 3, None, 1),  # the section's second line: its columns not shifted
    ]


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        {"version": 2, "sources": [], "mappings": ""},
        {"version": 3, "sources": "a.ts", "mappings": ""},
        {"version": 3, "sources": ["a.ts"], "names": [1], "mappings": ""},
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "AAAA!"},  # not base64
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "ACAA"},  # source 1 of 1
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "AAAAC"},  # a name, none given
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "AAD"},  # three fields
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "D"},  # a column before the line's start
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "A////////g"},  # past 32 bits
        {"version": 3, "sources": ["a.ts"], "names": [], "mappings": "AAA"},  # cut short
        {"version": 3, "sections": [{"offset": {"line": 0, "column": 0}, "url": "other.map"}]},
        {
            "version": 3,
            "sections": [
                {"offset": {"line": 2, "column": 0}, "map": {"version": 3, "sources": [], "mappings": ""}},
                {"offset": {"line": 1, "column": 0}, "map": {"version": 3, "sources": [], "mappings": ""}},
            ],
        },
    ],
)
def test_a_malformed_map_is_refused_whole(document):
    with pytest.raises(SourceMapError):
        parse_source_map(document if isinstance(document, str) else json.dumps(document)).originals([(1, 1), (1, 9)])


def test_fuzzed_mappings_never_raise_anything_else():
    generator = random.Random(7)
    alphabet = BASE64 + ",;!"
    for _round in range(2000):
        mappings = "".join(generator.choice(alphabet) for _ in range(generator.randint(0, 60)))
        text = json.dumps({"version": 3, "sources": ["a", "b"], "names": ["n"], "mappings": mappings})
        try:
            parse_source_map(text).originals([(1, 1), (1, 40), (2, 3), (9, 9)])
        except SourceMapError:
            pass


def test_a_map_of_more_strings_than_its_caps_is_refused_before_it_is_parsed(monkeypatch):
    from profiler.jit.v8 import source_maps

    monkeypatch.setattr(source_maps, "MAX_NAMES", 10)
    monkeypatch.setattr(source_maps, "MAX_SOURCES", 1)
    monkeypatch.setattr(source_maps, "MAX_SECTIONS", 0)
    names = [f"n{index}" for index in range(40)]
    with pytest.raises(SourceMapError, match="too many strings"):
        parse_source_map(json.dumps({"version": 3, "sources": ["a.ts"], "names": names, "mappings": "AAAA"}))
    parse_source_map(json.dumps({"version": 3, "sources": ["a.ts"], "names": names[:4], "mappings": "AAAA"}))


def test_a_map_of_millions_of_empty_arrays_is_refused_before_it_is_parsed():
    """120 MB of `[[],[],...]` parses into gigabytes of lists: counted first
    (outside strings), and refused."""
    import resource  # noqa: PLC0415
    import time  # noqa: PLC0415

    bomb = b'{"version":3,"sources":["a.ts"],"names":[],"mappings":"AAAA","x_pad":[' + b"[]," * 2_000_000 + b"[]]}"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(SourceMapError, match="too many arrays and objects"):
        parse_source_map(bomb)
    assert time.monotonic() - started < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB: nothing parsed


def test_brackets_inside_sources_content_are_not_structure():
    code = "function f(a) { return [a, [a], {a}]; }\n" * 20_000  # 100,000 brackets, in a string
    parsed = parse_source_map(
        json.dumps({"version": 3, "sources": ["a.ts"], "sourcesContent": [code], "names": [], "mappings": "AAAA"})
    )
    assert parsed.sources == ("a.ts",)
