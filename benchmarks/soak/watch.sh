# Sourced by run.sh and push.sh: the rows of a soak's table in $work/soak.md,
# for the jitprof process $jitprof, from $start (date +%s) for $seconds.

# One row: seconds, RSS, CPU, descriptors, what jitprof holds in the kernel,
# then the columns the command $1 prints (if given).
soak_row() {
  local rss cpu fds state extra=""
  rss=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$jitprof/status 2>/dev/null || true)
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14+$15)/hz}' /proc/$jitprof/stat 2>/dev/null || true)
  fds=$(ls /proc/$jitprof/fd 2>/dev/null | wc -l || true)  # gone: pipefail must not end the soak
  state=$(.venv/bin/python -m benchmarks.bpf_state "$jitprof" 2>/dev/null | tr ' ' '|' || true)
  [ -n "${1:-}" ] && extra=" | $($1)"
  [ -n "$rss" ] && [ -n "$state" ] && echo "| $(( $(date +%s) - start )) | $rss | $cpu | $fds | ${state//|/ | }$extra |" >> "$work/soak.md"
  return 0
}

# A row every $1 seconds until the churn's end ($seconds after it began, 10 s
# in); then the churn stops, the last row is taken 20 s later, once the exited
# processes are retired, and jitprof is stopped. $2: extra columns (soak_row).
soak_watch() {
  local every=$1 columns=${2:-} end=$((start + seconds + 10))
  soak_row "$columns"
  while kill -0 "$jitprof" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
    sleep "$every"
    soak_row "$columns"
  done
  touch "$work/stop-churn"
  sleep 20
  soak_row "$columns"
  kill -TERM "$jitprof" 2>/dev/null || true
  wait "$jitprof" || true
}
