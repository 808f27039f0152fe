#!/usr/bin/env bash
# measure-cold.sh measures the first run of `make demo` and of `make test` as
# a new user meets it: each from empty caches of its own (module cache, build
# cache, ~/.cache/nodemend), pointed at fresh temporary directories so that
# the caches this machine already has are neither used nor destroyed. It
# prints, per command, each step's time (from hack/prepare.sh's progress
# lines), the total wall time, the CPU time of everything it ran, and the load
# average while it ran — a figure taken beside other work is contended, and
# the CPU time says by how much less it would take alone.
#
# Usage: hack/measure-cold.sh [demo] [test]   (default: both, demo first)
# Environment: MEASURE_DIR (default /tmp) holds the temporary caches and the
# logs (measure-<command>.log); KEEP_CACHES=1 keeps the caches afterwards.
# Needs root, as the commands do. On 2 cores expect 15-20 minutes each.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
cmds=("$@")
[[ ${#cmds[@]} -gt 0 ]] || cmds=(demo test)
base="${MEASURE_DIR:-/tmp}"

summary=()
for cmd in "${cmds[@]}"; do
  dir="$(mktemp -d "${base}/nodemend-cold-${cmd}.XXXXXX")"
  log="${base}/measure-${cmd}.log"
  echo "== cold make ${cmd}: caches under ${dir}, log ${log}" >&2
  # The load average every 15 s, to say how busy the machine was.
  ( while :; do cut -d' ' -f1 /proc/loadavg; sleep 15; done ) >"${dir}/load" &
  sampler=$!
  start=$(date +%s)
  rc=0
  TIMEFORMAT='%R %U %S'
  { time env NODEMEND_CACHE="${dir}/nodemend" GOCACHE="${dir}/gocache" GOMODCACHE="${dir}/gomodcache" \
      make --no-print-directory "${cmd}" >"${log}" 2>&1 || rc=$?; } 2>"${dir}/time"
  kill "${sampler}" 2>/dev/null || true
  read -r real user sys <"${dir}/time"
  loads="$(sort -n "${dir}/load" | awk '{s+=$1; a[NR]=$1} END {if (NR) printf "mean %.1f, max %.1f", s/NR, a[NR]}')"
  {
    echo "cold make ${cmd} on $(date -u -d "@${start}" +%Y-%m-%d) — $(nproc) cores, exit ${rc}"
    printf '  %-90s %8s\n' "step" "seconds"
    # prepare.sh's lines: "==> step i/n: WHAT — about…" then "    done: WHAT in T".
    awk '
      /^==> step / { sub(/^==> /, ""); sub(/ — about.*/, ""); step=$0; next }
      /^    done: / { t=$0; sub(/.* in /, "", t); sub(/ s .*/, "", t); printf "  %-90s %8s\n", substr(step, 1, 90), t }
      /^    FAILED: / { printf "  %-90s %8s\n", substr(step, 1, 90), "FAILED" }
    ' "${log}"
    printf '  %-90s %8.0f\n' "total (wall)" "${real}"
    printf '  %-90s %8.0f\n' "CPU time of everything it ran (user + system)" "$(awk -v u="${user}" -v s="${sys}" 'BEGIN {print u + s}')"
    echo "  load average while it ran: ${loads} (alone on $(nproc) cores it would be about $(nproc) at most)"
  } | tee "${dir}/summary"
  summary+=("$(cat "${dir}/summary")")
  if [[ "${KEEP_CACHES:-0}" != 1 ]]; then
    chmod -R u+w "${dir}" 2>/dev/null || true # the module cache is read-only
    rm -rf "${dir}"
  fi
done
echo
printf '%s\n\n' "${summary[@]}"
