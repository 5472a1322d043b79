#!/usr/bin/env bash
# What running jitprof needs on a fresh Debian 12 machine, as root: BCC,
# kernel headers, the venv and native/ (with blazesym). What only the tests
# and benchmarks need is in setup-tests.sh. Idempotent: a second run checks
# and does nothing (well under a second).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt.sh

# --- Debian packages ------------------------------------------------------
apt_ensure python3-bpfcc libbpfcc gcc make binutils

# --- Kernel headers for BCC -----------------------------------------------
release="$(uname -r)"
modules="/lib/modules/$release"
if [ ! -d "$modules/build/include" ]; then
    if apt-cache show "linux-headers-$release" >/dev/null 2>&1; then
        apt_install "linux-headers-$release"
    else
        apt_update_once
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
    say "installing jitprof (editable) into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -e .
    echo "$wanted" > "$stamp"
fi
# BCC is Debian's pure-Python module over libbcc.so; PyPI's "bcc" is another project.
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -e "$site/bcc" ]; then
    ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
fi

# --- native/: our C library (through cffi) and blazesym's C API -----------------
if ! make -s -C native library >/dev/null; then
    say "error: could not build native/ (jitprof's C library with $(command -v gcc || echo "no gcc"), blazesym with $(command -v cargo || echo "no cargo")): make -C native says why"
    exit 1
fi

# --- jitprof's own bun: it transpiles bun processes' scripts to place their
# functions (never the process's own binary: a target chooses that). Pinned;
# the version is profiler/jit/bun/transpiler.py's BUN_VERSION.
bun_version=1.4.4
bun_prefix=".venv/lib/jitprof-bun-$bun_version"
if [ ! -x "$bun_prefix/node_modules/@oven/bun-linux-x64/bin/bun" ]; then
    if command -v npm >/dev/null; then
        say "installing jitprof's own bun $bun_version from the npm registry (to place Bun's functions)"
        npm install --silent --no-save --no-audit --no-fund --prefix "$bun_prefix" "@oven/bun-linux-x64@$bun_version" >/dev/null 2>&1 \
            || say "warning: could not install bun $bun_version; Bun's frames will be named without their scripts and lines"
    else
        say "warning: npm not found; Bun's frames will be named without their scripts and lines"
    fi
fi

# cffi's declarations of native/ and of blazesym's C API, parsed once (every
# start parsed them: 20 ms, and 30 ms of blazesym's helper's start).
.venv/bin/python -m profiler.native.library 2>/dev/null || say "warning: could not write native/'s parsed declarations; every run will parse them"
.venv/bin/python -m profiler.native.blazesym 2>/dev/null || say "warning: could not write blazesym's parsed declarations; every run will parse them"

# Bytecode for jitprof's own modules, written even where PYTHONDONTWRITEBYTECODE
# is set (it would otherwise compile every module at every start: 0.1 s).
.venv/bin/python -m compileall -q profiler >/dev/null

# The methods dataclasses writes for jitprof's records, compiled once (each
# start compiled them from source: 70 ms of its imports). Again only after a
# module changed.
.venv/bin/python -c 'from profiler.native import dataclass_code as code; code.stale() and code.write_table()' \
    || say "warning: could not keep the records' methods compiled; every start will compile them"

# --- The BPF sampler, compiled once for this kernel and BCC --------------------
# A first run then loads it in milliseconds, even with an empty cache. Only
# the default variant here (the tests' set-up compiles the others).
.venv/bin/python -m profiler.kernel.prebuild --default-only || say "warning: could not precompile the BPF sampler; the first run will"
