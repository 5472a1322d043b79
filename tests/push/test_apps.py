"""Application names from real processes' command lines and package.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from profiler.push import apps
from profiler.push.apps import App, AppRegistry, app_name_text, java_main, node_script


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
    process = subprocess.Popen(["node", "lib/main.js"], cwd=app_dir)
    try:
        _wait_for_exec(process.pid, "node")
        assert apps.identify(process.pid) == App("checkout-api", "node")
        (app_dir / "package.json").unlink()
        assert apps.identify(process.pid) == App("main", "node")  # no package: the script's name
    finally:
        process.kill()
        process.wait()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is installed by make setup")
def test_package_json_link_out_of_the_root_is_not_followed(tmp_path):
    """A package.json the target made a link to another file (here one of
    /proc) names nothing: it is read, capped, as JSON or not at all."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "main.js").write_text("setTimeout(() => {}, 30000)\n")
    os.symlink("/proc/self/environ", app_dir / "package.json")
    process = subprocess.Popen(["node", "main.js"], cwd=app_dir)
    try:
        _wait_for_exec(process.pid, "node")
        assert apps.identify(process.pid) == App("main", "node")
    finally:
        process.kill()
        process.wait()


def test_native_process_named_by_its_command(tmp_path):
    process = subprocess.Popen(["sleep", "30"])
    try:
        _wait_for_exec(process.pid, "sleep")
        assert apps.identify(process.pid) == App("sleep", "native")
    finally:
        process.kill()
        process.wait()


def test_registry_keeps_a_retired_process_until_the_next_cut():
    registry = AppRegistry(fixed_name="shop")
    registry.note(os.getpid(), "python")
    assert registry.app_of(os.getpid()) == App("shop", registry.app_of(os.getpid()).runtime)
    registry.forget(os.getpid())
    assert registry.app_of(os.getpid()) is not None  # its last samples may still be cut
    registry.drop_leaving()
    assert registry.app_of(os.getpid()) is None


def _wait_for_exec(pid: int, name: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if apps.comm_of(pid) == name:
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not exec {name}")


JAVA_CLASSES = Path(__file__).resolve().parents[2] / "fixtures" / "build" / "java"


@pytest.mark.skipif(shutil.which("java") is None or not (JAVA_CLASSES / "Hot.class").exists(),
                    reason="java and the fixtures are installed by make setup")
def test_jvm_named_by_its_main_class():
    process = subprocess.Popen(["java", "-Xmx64m", "-cp", str(JAVA_CLASSES), "Hot", "30"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_exec(process.pid, "java")
        assert apps.identify(process.pid) == App("Hot", "java")
    finally:
        process.terminate()  # its shutdown removes its hsperfdata file
        process.wait()
