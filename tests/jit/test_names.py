"""Names runtimes give JIT code, as jitprof shows them."""

from profiler.jit import runtimes
from profiler.jit.names import frame_for_name
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import FrameKind


def test_java_methods_read_like_java():
    frame = frame_for_name("long Hot.leaf(int)", runtimes.JAVA)
    assert (frame.name, frame.module, frame.kind, frame.tier) == ("Hot.leaf(int)", JIT_MODULE, FrameKind.JIT, "compiled")
    assert frame_for_name("void Hot.main(java.lang.String[])", runtimes.JAVA).name == "Hot.main(java.lang.String[])"
    assert frame_for_name("java.lang.Object[] a.B$C.<init>(int[], long)", runtimes.JAVA).name == "a.B$C.<init>(int[], long)"


def test_jvm_interpreter_and_stubs_are_labelled():
    interpreter = frame_for_name("Interpreter", runtimes.JAVA)
    assert interpreter.name == "[interpreter]" and interpreter.tier == "interpreted"
    assert frame_for_name("StubRoutines (1)", runtimes.JAVA).name == "[stub] StubRoutines (1)"
    assert frame_for_name("I2C/C2I adapters", runtimes.JAVA).tier == "stub"


def test_moarvm_frames_give_sub_and_line():
    frame = frame_for_name("fib(/work/fixtures/raku/fib.raku:2)", runtimes.MOARVM)
    assert frame.name == "fib (fib.raku:2)" and frame.file == "/work/fixtures/raku/fib.raku" and frame.line == 2
    assert frame_for_name("(gen/moar/BOOTSTRAP/v6c.nqp:2473)", runtimes.MOARVM).name == "<anon> (v6c.nqp:2473)"


def test_python_perf_trampolines_and_v8_and_anything_else():
    assert frame_for_name("py::compute:/srv/app.py").name == "compute (app.py)"
    v8 = frame_for_name("JS:*inner /app/chain.js:8:15")
    assert v8.name == "inner chain.js:8" and v8.tier == "turbofan" and v8.file == "/app/chain.js"
    other = frame_for_name("wasm-function[3] <tier-up>")
    assert other.name == "wasm-function[3] <tier-up>" and other.kind is FrameKind.JIT
    # A JVM-looking name from an unknown writer is not rewritten.
    assert frame_for_name("long Hot.leaf(int)").name == "long Hot.leaf(int)"
