"""Application names from real processes' command lines and package.json."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler.jit.jvm.application import java_main
from profiler.jit.v8.application import node_script
from profiler.push import apps
from profiler.push.apps import App, AppRegistry, app_name_text


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["node", "server.js"], "server.js"),
        (["node", "--max-old-space-size", "4096", "-r", "dotenv/config", "dist/main.js", "--port", "80"], "dist/main.js"),
        (["node", "--perf-basic-prof", "--inspect=0", "app.mjs"], "app.mjs"),
        (["node", "-e", "1+1"], None),
        (["node"], None),
        (["node", "--", "weird.js"], "weird.js"),
    ],
)
def test_node_script(argv, script):
    assert node_script(argv) == script


@pytest.mark.parametrize(
    ("argv", "main"),
    [
        (["java", "-Xmx1g", "-cp", "a.jar:b.jar", "com.example.Main", "arg"], "com.example.Main"),
        (["java", "-XX:+PreserveFramePointer", "-jar", "/srv/billing-2.1.jar"], "billing-2.1"),
        (["java", "-p", "mods", "-m", "org.shop/org.shop.App"], "org.shop.App"),
        (["java", "-version"], None),
    ],
)
def test_java_main(argv, main):
    assert java_main(argv) == main


def test_names_are_safe_for_the_series_syntax():
    assert app_name_text("@acme/api server{x=1},y") == "acme/api_server_x_1_y"
    assert app_name_text("...") == "unknown"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is installed by make setup")
def test_node_process_named_by_its_package(tmp_path):
    app_dir = tmp_path / "srv" / "checkout"
    (app_dir / "lib").mkdir(parents=True)
    (app_dir / "package.json").write_text(json.dumps({"name": "checkout-api", "version": "1.0.0"}))
    (app_dir / "lib" / "main.js").write_text("setTimeout(() => {}, 30000)\n")
    with _running(["node", "lib/main.js"], "node", cwd=app_dir) as process:
        assert apps.application_of(process.pid) == App("checkout-api", "node", "node")
        (app_dir / "package.json").unlink()
        assert apps.application_of(process.pid) == App("main", "node", "node")  # no package: the script's name


@pytest.mark.skipif(shutil.which("node") is None, reason="node is installed by make setup")
def test_package_json_link_out_of_the_root_is_not_followed(tmp_path):
    """A package.json the target made a link to another file (here one of
    /proc) names nothing: it is read, capped, as JSON or not at all."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "main.js").write_text("setTimeout(() => {}, 30000)\n")
    os.symlink("/proc/self/environ", app_dir / "package.json")
    with _running(["node", "main.js"], "node", cwd=app_dir) as process:
        assert apps.application_of(process.pid) == App("main", "node", "node")


def test_native_process_named_by_its_command(tmp_path):
    with _running(["sleep", "30"], "sleep") as process:
        assert apps.application_of(process.pid) == App("sleep", "native", "sleep")


def test_registry_keeps_a_retired_process_until_the_next_cut():
    registry = AppRegistry(fixed_name="shop")
    registry.note(os.getpid(), "python")
    assert registry.app_of(os.getpid()).name == "shop"
    registry.forget(os.getpid())
    assert registry.app_of(os.getpid()) is not None  # its last samples may still be cut
    registry.drop_leaving()
    assert registry.app_of(os.getpid()) is None


@contextlib.contextmanager
def _running(argv: list[str], name: str, **popen: object) -> Iterator[subprocess.Popen]:
    """The program, once it runs as name (exec'd); stopped at the end with
    SIGTERM (a JVM's shutdown removes its hsperfdata file)."""
    process = subprocess.Popen(argv, **popen)  # type: ignore[call-overload]
    try:
        deadline = time.monotonic() + 5
        # comm changes early in exec, before the new command line is in place
        while apps.comm_of(process.pid) != name or apps.command_line(process.pid) != [str(part) for part in argv]:
            if time.monotonic() >= deadline:
                raise AssertionError(f"{process.pid} did not exec {name}")
            time.sleep(0.01)
        yield process
    finally:
        process.terminate()
        process.wait()


JAVA_CLASSES = Path(__file__).resolve().parents[2] / "fixtures" / "build" / "java"


@pytest.mark.skipif(
    shutil.which("java") is None or not (JAVA_CLASSES / "Hot.class").exists(),
    reason="java and the fixtures are installed by make setup",
)
def test_jvm_named_by_its_main_class():
    java = ["java", "-Xmx64m", "-cp", str(JAVA_CLASSES), "Hot", "30"]
    with _running(java, "java", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        assert apps.application_of(process.pid) == App("Hot", "java", "java")
