"""Reading protobuf messages a target publishes: the fields of one message,
bounded (a target's bytes are hostile: any malformation ends the read)."""

from __future__ import annotations

from collections.abc import Iterator

MAX_FIELDS = 4096  # of one message
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


class MalformedMessage(ValueError):
    pass


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 64:
        if at >= len(data):
            raise MalformedMessage("a varint runs past the end")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise MalformedMessage("a varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value): an int for varints and fixed
    widths, the bytes of a length-delimited field."""
    at = 0
    for _count in range(MAX_FIELDS):
        if at >= len(data):
            return
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise MalformedMessage("field number 0")
        if wire_type == VARINT:
            value, at = _varint(data, at)
            yield number, wire_type, value
        elif wire_type == LENGTH_DELIMITED:
            length, at = _varint(data, at)
            if length > len(data) - at:
                raise MalformedMessage("a field runs past the end")
            yield number, wire_type, data[at : at + length]
            at += length
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            if at + width > len(data):
                raise MalformedMessage("a fixed field runs past the end")
            yield number, wire_type, int.from_bytes(data[at : at + width], "little")
            at += width
        else:
            raise MalformedMessage(f"wire type {wire_type}")
    raise MalformedMessage(f"more than {MAX_FIELDS} fields")
