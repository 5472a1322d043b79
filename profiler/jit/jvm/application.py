"""Which application a JVM is, for a store's series names: its main class,
jar or module, from its command line."""

from __future__ import annotations

from pathlib import PurePosixPath

_JAVA_VALUE_OPTIONS = frozenset({"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules", "-d"})


def java_main(arguments: list[str]) -> str | None:
    """The main class (or jar, or module/class) of a java command line."""
    index = 1
    while index < len(arguments):
        argument = arguments[index]
        if argument == "-jar" and index + 1 < len(arguments):
            return PurePosixPath(arguments[index + 1]).name.removesuffix(".jar")
        if argument in ("-m", "--module") and index + 1 < len(arguments):
            return arguments[index + 1].rpartition("/")[2] or arguments[index + 1]
        if argument.startswith("-"):
            index += 2 if argument in _JAVA_VALUE_OPTIONS else 1
            continue
        return argument
    return None
