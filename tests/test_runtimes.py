import os

from profiler.runtimes import NODE, identify, inject_environment, merge_node_options


def test_node_options_merged_without_duplicates():
    assert merge_node_options(None) == "--perf-basic-prof --interpreted-frames-native-stack"
    assert merge_node_options("--max-old-space-size=100") == (
        "--max-old-space-size=100 --perf-basic-prof --interpreted-frames-native-stack"
    )
    assert merge_node_options("--perf-basic-prof --inspect") == "--perf-basic-prof --inspect --interpreted-frames-native-stack"
    both = "--interpreted-frames-native-stack --perf-basic-prof"
    assert merge_node_options(both) == both
    assert merge_node_options('--title="a b" --perf-basic-prof').startswith('--title="a b"')


def test_environment_is_copied_not_changed():
    original = {"PATH": "/bin", "NODE_OPTIONS": "--trace-warnings"}
    injected = inject_environment(original)
    assert original["NODE_OPTIONS"] == "--trace-warnings"
    assert injected["NODE_OPTIONS"].startswith("--trace-warnings ") and injected["PATH"] == "/bin"


def test_identify_by_executable():
    assert identify(os.getpid()) is None  # python
    assert identify(2**22 + 5) is None
    assert "NODE_OPTIONS" in NODE.fix
