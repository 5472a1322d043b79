"""The OpenTelemetry process context (OTEP 4719): an SDK publishes its
process's resource attributes in a mapping named OTEL_CTX, a 32-byte header
(signature, version 2, payload size, publication time, payload address)
pointing to a protobuf ProcessContext. Its extra attributes carry the
thread context's schema and the names of its attribute keys by index.

Read as a seqlock: the publication time is 0 while the SDK changes it, and
another time after; a read between two equal non-zero times is whole."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from profiler.kernel.procmaps import MapEntry
from profiler.labels.protobuf_fields import LENGTH_DELIMITED, VARINT, MalformedMessage, fields

SIGNATURE = b"OTEL_CTX"
VERSION = 2
MAX_PAYLOAD = 64 << 10
MAX_ATTRIBUTES = 128
MAX_KEY = 128  # bytes of an attribute's key, and of a value kept
MAX_VALUE = 256
MAX_THREAD_KEYS = 256  # a thread record's key is one byte
READ_ATTEMPTS = 3
_HEADER = struct.Struct("<8sIIQQ")
MAPPING_NAMES = ("/memfd:OTEL_CTX", "[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]")
SCHEMA_KEY = "threadlocal.schema_version"
KEY_MAP_KEY = "threadlocal.attribute_key_map"


class Memory(Protocol):
    def read(self, address: int, length: int) -> bytes | None: ...


@dataclass(frozen=True)
class ProcessContext:
    """What a process publishes of its OpenTelemetry resource and thread records."""

    resource: tuple[tuple[str, str], ...]  # the resource's attributes (service.name, ...)
    thread_keys: tuple[str, ...]  # a thread record's attribute names, by key index
    schema: str  # the thread context's schema version ("" if none published)
    published_ns: int


def context_address(entries: Sequence[MapEntry]) -> int | None:
    """Where the process's OTEL_CTX mapping starts, if it has one."""
    for entry in entries:
        if entry.readable and not entry.executable and entry.path.startswith(MAPPING_NAMES):
            return entry.start
    return None


def read_process_context(memory: Memory, address: int) -> ProcessContext | None:
    """The context published at address; None when there is none, it does
    not check out, or it kept changing under the reads."""
    for _attempt in range(READ_ATTEMPTS):
        header = memory.read(address, _HEADER.size)
        if header is None:
            return None
        signature, version, size, published, payload_at = _HEADER.unpack(header)
        if signature != SIGNATURE or version != VERSION or not 0 < size <= MAX_PAYLOAD:
            return None
        if published == 0:
            continue  # being changed
        payload = memory.read(payload_at, size)
        again = memory.read(address + 16, 8)
        if again is None or struct.unpack("<Q", again)[0] != published:
            continue
        if payload is None:
            return None
        try:
            return decode_process_context(payload, published)
        except MalformedMessage:
            return None
    return None


def decode_process_context(payload: bytes, published_ns: int = 0) -> ProcessContext:
    """ProcessContext{resource = 1: Resource{attributes = 1}, extra_attributes = 2}."""
    resource: list[tuple[str, str]] = []
    thread_keys: tuple[str, ...] = ()
    schema = ""
    for number, wire_type, value in fields(payload):
        if wire_type != LENGTH_DELIMITED or not isinstance(value, bytes):
            continue
        if number == 1:
            for inner, inner_type, attribute in fields(value):
                if inner == 1 and inner_type == LENGTH_DELIMITED and isinstance(attribute, bytes):
                    pair = _key_value(attribute)
                    if pair is not None and isinstance(pair[1], str) and len(resource) < MAX_ATTRIBUTES:
                        resource.append(pair)  # type: ignore[arg-type]
        elif number == 2:
            pair = _key_value(value)
            if pair is None:
                continue
            key, found = pair
            if key == SCHEMA_KEY and isinstance(found, str):
                schema = found
            elif key == KEY_MAP_KEY and isinstance(found, tuple):
                thread_keys = found[:MAX_THREAD_KEYS]
    return ProcessContext(tuple(resource), thread_keys, schema, published_ns)


def _key_value(data: bytes) -> tuple[str, str | tuple[str, ...]] | None:
    """KeyValue{key = 1, value = 2: AnyValue}: a scalar as text, an array of scalars as a tuple."""
    key = ""
    found: str | tuple[str, ...] | None = None
    for number, wire_type, value in fields(data):
        if number == 1 and wire_type == LENGTH_DELIMITED and isinstance(value, bytes):
            key = _text(value, MAX_KEY)
        elif number == 2 and wire_type == LENGTH_DELIMITED and isinstance(value, bytes):
            found = _any_value(value, nested=True)
    return (key, found) if key and found is not None else None


def _any_value(data: bytes, nested: bool) -> str | tuple[str, ...] | None:
    """AnyValue: string 1, bool 2, int 3, double 4, array 5 (of AnyValue, field 1)."""
    for number, wire_type, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            return _text(value, MAX_VALUE)
        if number == 2 and wire_type == VARINT and isinstance(value, int):
            return "true" if value else "false"
        if number == 3 and wire_type == VARINT and isinstance(value, int):
            return str(value - (1 << 64) if value >= 1 << 63 else value)
        if number == 4 and isinstance(value, int):
            return repr(struct.unpack("<d", value.to_bytes(8, "little"))[0])
        if number == 5 and nested and isinstance(value, bytes):
            elements = []
            for inner, _inner_type, element in fields(value):
                if inner == 1 and isinstance(element, bytes):
                    text = _any_value(element, nested=False)
                    elements.append(text if isinstance(text, str) else "")
            return tuple(elements)
    return None


def _text(data: bytes, limit: int) -> str:
    return data[:limit].decode("utf-8", "replace")
