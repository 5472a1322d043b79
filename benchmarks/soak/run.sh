#!/usr/bin/env bash
# make soak: jitprof at 99 Hz on the service above for SOAK_SECONDS (default
# 1800); its RSS, CPU, open descriptors and kernel state (followed processes,
# trie entries, unwind tables and rows, read from its BPF maps) every 30 s into
# docs/soak.md. The churn starts after the first row (the baseline) and stops
# SOAK_SECONDS later; the last row is taken 20 s after that, once the exited
# processes are retired, and should match the first.
set -euo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/soak/watch.sh
seconds="${SOAK_SECONDS:-1800}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
CHURN_DELAY=10 CHURN_STOP="$work/stop-churn" \
  .venv/bin/python -m profiler -F 99 --no-tui -d $((seconds + 60)) -o "$work/soak.jitprof" -- sh benchmarks/soak/service.sh \
    >/dev/null 2>"$work/run.err" &
jitprof=$!
start=$(date +%s)
{
  echo "# Soak: a long run with processes coming and going"
  echo
  echo "Produced by \`make soak\` (\`SOAK_SECONDS=$seconds benchmarks/soak/run.sh\`) on $(date +%F) at commit $(git rev-parse --short HEAD),"
  echo "kernel $(uname -r), $(nproc) CPUs: jitprof at 99 Hz on \`benchmarks/soak/service.sh\`, a node worker and, from 10 s"
  echo "to $((seconds + 10)) s, short node and native processes coming and going (about three a second)."
  echo "jitprof's own process every 30 s, and what it holds in the kernel (\`benchmarks/bpf_state.py\`, read from its BPF maps);"
  echo "the last row is taken 20 s after the churn stopped:"
  echo
  echo "| seconds | RSS (MiB) | CPU (s) | open descriptors | followed processes | trie entries | unwind tables | unwind rows |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
} > "$work/soak.md"
sleep 8
soak_watch 30
{ echo; echo "The run's summary line:"; echo; echo '```'; grep '^jitprof: [0-9]' "$work/run.err" || true; echo '```'; } >> "$work/soak.md"
cp "$work/soak.md" docs/soak.md
cat docs/soak.md
