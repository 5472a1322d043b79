#!/usr/bin/env bash
# make soak: jitprof at 99 Hz on the service above for SOAK_SECONDS (default
# 1800); its RSS, CPU and open descriptors every 30 s into docs/soak.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${SOAK_SECONDS:-1800}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m profiler -F 99 --no-tui -d "$seconds" -o "$work/soak.jitprof" -- sh benchmarks/soak/service.sh \
    >/dev/null 2>"$work/run.err" &
jitprof=$!
hz=$(getconf CLK_TCK)
start=$(date +%s)
{
  echo "# Soak: a long run with processes coming and going"
  echo
  echo "Produced by \`make soak\` (\`SOAK_SECONDS=$seconds benchmarks/soak/run.sh\`) on $(date +%F), kernel $(uname -r), $(nproc) CPUs:"
  echo "jitprof at 99 Hz on \`benchmarks/soak/service.sh\` (a node worker, short node and native processes"
  echo "coming and going). jitprof's own process, every 30 s:"
  echo
  echo "| seconds | RSS (MiB) | CPU (s) | open descriptors |"
  echo "| --- | --- | --- | --- |"
} > "$work/soak.md"
sleep 1
while kill -0 "$jitprof" 2>/dev/null; do
  rss=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$jitprof/status 2>/dev/null || true)
  cpu=$(awk -v hz="$hz" '{printf "%.1f", ($14+$15)/hz}' /proc/$jitprof/stat 2>/dev/null || true)
  fds=$(ls /proc/$jitprof/fd 2>/dev/null | wc -l)
  [ -n "$rss" ] && echo "| $(( $(date +%s) - start )) | $rss | $cpu | $fds |" >> "$work/soak.md"
  sleep 30
done
wait "$jitprof" || true
{ echo; echo "The run's summary line:"; echo; echo '```'; grep '^jitprof: [0-9]' "$work/run.err" || true; echo '```'; } >> "$work/soak.md"
cp "$work/soak.md" docs/soak.md
cat docs/soak.md
