"""Java's internal names made readable the way HotSpot's perf map writes
them (so that the two sources name a method alike): java/util/HashMap ->
java.util.HashMap, a method's descriptor (ILjava/lang/String;[J)V ->
int, java.lang.String, long[]."""

from __future__ import annotations

_PRIMITIVES = {
    "B": "byte",
    "C": "char",
    "D": "double",
    "F": "float",
    "I": "int",
    "J": "long",
    "S": "short",
    "Z": "boolean",
    "V": "void",
}
MAX_PARAMETERS = 255  # the class file's limit


def class_name(internal: str) -> str:
    return internal.replace("/", ".")


def parameter_types(descriptor: str) -> list[str] | None:
    """The parameter types of a method descriptor; None when it is not one."""
    if not descriptor.startswith("("):
        return None
    types: list[str] = []
    position = 1
    while position < len(descriptor) and descriptor[position] != ")":
        dimensions = 0
        while position < len(descriptor) and descriptor[position] == "[":
            dimensions += 1
            position += 1
        if position >= len(descriptor):
            return None
        code = descriptor[position]
        if code == "L":
            end = descriptor.find(";", position)
            if end < 0:
                return None
            name = class_name(descriptor[position + 1 : end])
            position = end + 1
        elif code in _PRIMITIVES and code != "V":
            name = _PRIMITIVES[code]
            position += 1
        else:
            return None
        types.append(name + "[]" * dimensions)
        if len(types) > MAX_PARAMETERS:
            return None
    if position >= len(descriptor):
        return None
    return types


def method_display(klass: str, method: str, descriptor: str) -> str:
    """ "Hot.leaf(int)": the class (dotted), the method and its parameter types."""
    parameters = parameter_types(descriptor)
    listed = ", ".join(parameters) if parameters is not None else "?"
    return f"{class_name(klass)}.{method}({listed})"
