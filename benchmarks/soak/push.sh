#!/usr/bin/env bash
# make soak-push: `jitprof --all --push` at 99 Hz, every 15 s to a receiver on
# 127.0.0.1, for SOAK_SECONDS (default 3600) while benchmarks/soak/service.sh
# runs beside it; jitprof's RSS, CPU, descriptors, kernel state and the
# profiles received every SOAK_EVERY seconds (default 60) into docs/soak-push.md. As in run.sh, the churn
# starts after the first row and the last row is taken 20 s after it stops.
set -euo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/soak/watch.sh
seconds="${SOAK_SECONDS:-3600}"
every="${SOAK_EVERY:-60}"
work="$(mktemp -d)"
cleanup() { [ -n "${service:-}" ] && kill -- -"$service" 2>/dev/null; kill "${store:-}" 2>/dev/null; rm -rf "$work"; return 0; }
trap cleanup EXIT
.venv/bin/python -m benchmarks.soak.receiver "$work/store" &
store=$!
while [ ! -s "$work/store" ]; do sleep 0.1; done
url=$(cut -d' ' -f1 "$work/store")
.venv/bin/python -m profiler --all -F 99 --push "$url" --interval 15 --spool-dir "$work/spool" -d $((seconds + every + 90)) \
    >/dev/null 2>"$work/run.err" &
jitprof=$!
sleep 3
# SOAK_SERVICE=0: no service of its own (one already runs beside it, make soak's).
if [ "${SOAK_SERVICE:-1}" != 0 ]; then
  CHURN_DELAY=10 CHURN_STOP="$work/stop-churn" setsid sh benchmarks/soak/service.sh >/dev/null 2>&1 &
  service=$!
fi
start=$(date +%s)
{
  echo "# Soak: --all --push, a long run with processes coming and going"
  echo
  echo "Produced by \`make soak-push\` (\`SOAK_SECONDS=$seconds benchmarks/soak/push.sh\`) on $(date +%F) at commit $(git rev-parse --short HEAD),"
  echo "kernel $(uname -r), $(nproc) CPUs, SOAK_SERVICE=${SOAK_SERVICE:-1}: \`jitprof --all -F 99 --push URL --interval 15\` to a receiver on 127.0.0.1, with"
  echo "\`benchmarks/soak/service.sh\` beside it (a node worker and, from 10 s to $((seconds + 10)) s, short node and native processes,"
  echo "about three a second) and whatever else the machine runs. jitprof's own process every ${every} s, what it holds in the kernel"
  echo "(\`benchmarks/bpf_state.py\`), and the profiles the receiver took; the last row is taken 20 s after the churn stopped:"
  echo
  echo "| seconds | RSS (MiB) | CPU (s) | open descriptors | followed processes | trie entries | unwind tables | unwind rows | profiles received | KiB received |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} > "$work/soak.md"
received() { awk '{printf "%d | %d", $2, $3/1024}' "$work/store"; }
sleep 5
soak_watch "$every" received
sleep 2
{ echo; echo "The run's summary lines:"; echo; echo '```'; grep -E '^jitprof: ([0-9]|--push to|--otlp to)' "$work/run.err" || true; echo '```'; } >> "$work/soak.md"
{ echo; echo "Its log (the push thread's lines):"; echo; echo '```'; grep '^jitprof: push:' "$work/run.err" | head -20 || true; echo '```'; } >> "$work/soak.md"
echo "profiles received in all: $(cut -d' ' -f2 "$work/store")" >> "$work/soak.md"
cp "$work/soak.md" docs/soak-push.md
cat docs/soak-push.md
