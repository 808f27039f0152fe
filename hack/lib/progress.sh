# progress.sh (sourced): what a cold first build prints while it works.
# A cold `make demo` or `make test` compiles the control plane from source
# for many minutes, during which `go build` itself prints nothing; each step
# says what it builds, which step of how many it is, and about how long it
# takes (measured where progress_estimate says so), then prints a line every minute
# until it is done.
#
#   progress_step KEY "what is built" command [args...]
#
# KEY names the step's measured figure in progress_estimate. The step's
# number comes from NODEMEND_STEP ("i/n", set by hack/prepare.sh for a plan
# of several scripts); without it a script's steps count themselves.

# Seconds each step takes on a quiet 2-core machine with empty caches.
# Measured: the test's control plane, the metadata mock and every package's
# tests are the step times of `make measure-cold test` of 2026-12-06, alone,
# with go test -vet=off (620, 37 and 467 s). The demo's steps are those of `make measure-cold demo`
# of the same day, taken beside other builds (load 5.5) and scaled by 0.6 to
# the CPU that run used on a quiet machine (2,348 s of CPU at the 1.74 cores
# the quiet test run kept busy): estimates until it is measured alone. Replace
# them with each change of pins.
progress_estimate() {
  case "$1" in
    debian-packages) echo 60 ;;           # estimate
    nodemend-binaries) echo 110 ;;        # the demo's, after the control plane (scaled)
    control-plane-test) echo 620 ;;       # etcd, kube-apiserver, kube-scheduler (measured)
    control-plane-demo) echo 720 ;;       # the same and kube-controller-manager (scaled)
    kube-controller-manager) echo 120 ;;  # alone, after the test's three (the difference of the two above)
    etcd) echo 56 ;;
    kube-extra) echo 300 ;;               # kubelet, kube-proxy (real node only; estimate)
    sim-tools) echo 380 ;;                # kwok and karpenter-kwok, Go 1.27 (scaled)
    metadata-mock) echo 37 ;;             # (measured)
    go-test) echo 467 ;;                  # compiling and running every package (measured)
    demo) echo 45 ;;                      # (scaled)
    *) echo 0 ;;
  esac
}

# progress_kube_key BINARY... names the measured figure of building these
# control-plane binaries together (hack/kube-binaries.sh).
progress_kube_key() {
  case "$*" in
    "etcd kube-apiserver kube-scheduler") echo control-plane-test ;;
    "etcd kube-apiserver kube-scheduler kube-controller-manager") echo control-plane-demo ;;
    kube-controller-manager) echo kube-controller-manager ;;
    etcd) echo etcd ;;
    *kube-apiserver*) echo control-plane-demo ;;
    *) echo kube-extra ;;
  esac
}

# progress_minutes SECONDS prints a rounded duration for people.
progress_minutes() {
  local s=$1
  if (( s < 90 )); then echo "${s} s"; else echo "$(( (s + 30) / 60 )) min"; fi
}

_progress_own=0
# progress_header KEY "what" prints the step's line and sets _progress_scaled
# to its estimate for this machine's cores.
progress_header() {
  local key=$1 what=$2 est cores label
  est=$(progress_estimate "${key}")
  cores=$(nproc 2>/dev/null || echo 2)
  # Compilation spreads over the cores; more cores, proportionally less
  # (an estimate, not a promise: links and the largest packages are serial).
  _progress_scaled=$(( est * 2 / (cores > 2 ? cores : 2) ))
  if [[ -n "${NODEMEND_STEP:-}" ]]; then
    label="step ${NODEMEND_STEP}"
  else
    _progress_own=$((_progress_own + 1))
    label="step ${_progress_own}"
  fi
  if (( est > 0 )); then
    echo "==> ${label}: ${what} — about $(progress_minutes "${_progress_scaled}") on ${cores} cores the first time (on 2 cores: $(progress_minutes "${est}"))" >&2
  else
    echo "==> ${label}: ${what}" >&2
  fi
}

progress_step() {
  local key=$1 what=$2; shift 2
  progress_header "${key}" "${what}"
  local scaled=${_progress_scaled}
  local start=$SECONDS rc=0
  # A line a minute while the command runs (go build is silent for
  # minutes). The command runs in the foreground, so that Ctrl-C stops it;
  # the ticker is the background job, ended by its own pid.
  _progress_ticker "${what}" "${scaled}" >/dev/null &
  local ticker=$!
  "$@" || rc=$?
  kill "${ticker}" 2>/dev/null || true
  wait "${ticker}" 2>/dev/null || true
  progress_done "${what}" "${start}" "${rc}"
}

# progress_done "what" START RC prints how a step ended (START: its $SECONDS
# at the start). hack/measure-cold.sh reads the seconds from these lines.
progress_done() {
  local t=$((SECONDS - $2))
  if (( $3 == 0 )); then
    echo "    done: $1 in ${t} s ($(progress_minutes "${t}"))" >&2
  else
    echo "    FAILED: $1 (exit $3) after ${t} s" >&2
  fi
  return "$3"
}

# _progress_ticker runs as a background job; on TERM it ends its sleep too,
# so that no orphaned sleep holds the caller's output open (a test that runs
# a build script waits for its output to close).
_progress_ticker() {
  local what=$1 scaled=$2 start=$SECONDS nap=
  trap 'if [[ -n "${nap}" ]]; then kill "${nap}" 2>/dev/null || true; fi; exit 0' TERM
  while :; do
    sleep 60 &
    nap=$!
    wait "${nap}"
    local t=$((SECONDS - start))
    if (( scaled > t )); then
      echo "    ... ${what}: $(progress_minutes "${t}") so far, about $(progress_minutes $((scaled - t))) to go" >&2
    else
      echo "    ... ${what}: $(progress_minutes "${t}") so far (longer than measured: a busy or slower machine)" >&2
    fi
  done
}
