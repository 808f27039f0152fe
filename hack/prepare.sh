#!/usr/bin/env bash
# prepare.sh runs `make demo` or `make test` as a numbered plan. On a cold
# machine it first says what it will build and about how long each step
# took when measured (hack/measure-cold.sh, README "First run"), then works
# through the plan, each step naming what it builds, which step of how many
# it is, and printing a line a minute while it compiles. On a warm machine
# the builds find their caches and only the last step does any work.
#
# Usage: hack/prepare.sh [--plan] demo|test [ARGS...]   (ARGS go to the demo or to go test;
#        --plan prints the plan and runs nothing)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/.." && pwd)"
cd "${root}"
# shellcheck source=lib/progress.sh
source "${here}/lib/progress.sh"
GO="${GO:-go}"
plan_only=false
if [[ "${1:-}" == --plan ]]; then plan_only=true; shift; fi
mode="${1:?usage: hack/prepare.sh [--plan] demo|test [ARGS...]}"
shift

case "${mode}" in
  demo) kube=(etcd kube-apiserver kube-scheduler kube-controller-manager) ;;
  test) kube=(etcd kube-apiserver kube-scheduler) ;;
  *) echo "prepare.sh: unknown command ${mode} (demo or test)" >&2; exit 2 ;;
esac

# The plan: KEY|WHAT|COMMAND, only the steps that have work to do.
plan=()
missing_debs="$("${here}/ensure-deps.sh" --missing)"
[[ -z "${missing_debs}" ]] || plan+=("debian-packages|installing Debian packages: $(echo ${missing_debs})|${here}/ensure-deps.sh")
missing_kube="$("${here}/kube-binaries.sh" --missing "${kube[@]}")"
[[ -z "${missing_kube}" ]] || plan+=("kube|the control plane|${here}/kube-binaries.sh ${kube[*]}")
# After the control plane, whose compiled packages they share (hack/demo.sh).
[[ "${mode}" == demo ]] && plan+=("nodemend-binaries|building nodemend's agent, controller, kubectl-mend and the demo into bin/demo|${here}/demo.sh --build")
if [[ "${mode}" == demo && -n "$("${here}/sim-binaries.sh" --missing)" ]]; then
  plan+=("sim-tools|the simulation's kwok and Karpenter|${here}/sim-binaries.sh")
fi
[[ -z "$("${here}/metadata-mock.sh" --missing)" ]] || plan+=("metadata-mock|AWS's EC2 metadata mock|${here}/metadata-mock.sh")
case "${mode}" in
  demo) plan+=("demo|the demo (≈ 40 s)|${here}/demo.sh") ;;
  test) plan+=("go-test|every package's tests, compiled and run against the control plane|go-test") ;;
esac

n=${#plan[@]}
total=0
for p in "${plan[@]}"; do
  IFS='|' read -r key _ _ <<<"${p}"
  [[ "${key}" == kube ]] && key="$(progress_kube_key ${missing_kube})"
  total=$(( total + $(progress_estimate "${key}") ))
done
cores=$(nproc 2>/dev/null || echo 2)
if (( n > 1 )); then
  echo "==> make ${mode}, first run: ${n} steps, about $(progress_minutes $(( total * 2 / (cores > 2 ? cores : 2) ))) on ${cores} cores" \
    "($(progress_minutes "${total}") on 2); built once, cached under ${NODEMEND_CACHE:-~/.cache/nodemend} and Go's caches" >&2
fi

if [[ "${plan_only}" == true ]]; then
  i=0
  for p in "${plan[@]}"; do
    i=$((i + 1))
    IFS='|' read -r key what cmd <<<"${p}"
    [[ "${key}" == kube ]] && { key="$(progress_kube_key ${missing_kube})"; what="building $(echo ${missing_kube}) from source"; }
    echo "step ${i}/${n}: ${what} (about $(progress_minutes "$(progress_estimate "${key}")") on 2 cores, cold)"
  done
  exit 0
fi

# While the first steps compile, the later steps' modules (and the Go 1.27
# toolchain of the simulation's tools) download in the background: the
# download waits on the network, the compiling on the cores, and each used
# to wait for the other. go commands share the module cache safely (it is
# locked per module); the build of each step downloads whatever is still
# missing itself.
prefetch() {
  local kubepkgs=()
  for b in ${missing_kube}; do
    case "${b}" in
      etcd) kubepkgs+=(go.etcd.io/etcd/server/v3) ;;
      *) kubepkgs+=("k8s.io/kubernetes/cmd/${b}") ;;
    esac
  done
  [[ ${#kubepkgs[@]} -eq 0 ]] || (cd "${here}/kubebin" && GOFLAGS="${GOFLAGS:+${GOFLAGS} }-mod=mod" go list -deps "${kubepkgs[@]}" >/dev/null 2>&1) || true
  if [[ "${mode}" == demo ]]; then
    (cd "${root}/tools" && GOTOOLCHAIN=go1.27.3 go list -deps sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/karpenter/kwok >/dev/null 2>&1) || true
  fi
  (cd "${here}/tools" && go list -deps github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock >/dev/null 2>&1) || true
}
prefetcher=
if (( n > 1 )); then
  prefetch &
  prefetcher=$!
  # Under set -e a failing kill (the prefetch already done) would end the
  # trap, and the script, with its status: a green run exiting 1.
  trap 'kill "${prefetcher}" 2>/dev/null || true' EXIT
fi

# Test binaries are linked without a symbol table or DWARF (-s -w): a cold
# run links some eighty of them, and the debug information is a quarter of
# each link's CPU (pkg/repair/controller: 13.0 s against 9.3 s) that no test
# reads; panics and stack traces need neither. Compiled packages are shared
# with every other build all the same (link flags are not part of them).
#
# And without go test's own vet pass (-vet=off): `make lint`, which CI runs
# first, runs go vet on every package with all its checks, a superset of the
# few go test runs. On a cold cache that pass is not free: it analyses every
# dependency for facts (printf wrappers and the like) — 1,078 packages from
# other modules and the standard library, none of which the control plane's
# build has analysed — a quarter of the CPU of compiling them
# (pkg/repair/policy's tests from an empty cache: 542 s of CPU with it, 417 s
# without, measured 2026-12-06).
go_test() {
  KUBEBUILDER_ASSETS="$("${here}/kube-binaries.sh" "${kube[@]}" | tail -1)" "${GO}" test -count=1 -vet=off -ldflags="-s -w" "$@" ./...
}

i=0
for p in "${plan[@]}"; do
  i=$((i + 1))
  IFS='|' read -r key what cmd <<<"${p}"
  export NODEMEND_STEP="${i}/${n}"
  case "${key}" in
    kube) ${cmd} >/dev/null ;;                       # its own progress line
    metadata-mock) ${cmd} >/dev/null ;;              # likewise
    sim-tools) ${cmd} >/dev/null ;;                  # likewise
    # The demo prints its own phases; no ticker between them.
    demo)
      progress_header demo "${what}"
      start=$SECONDS rc=0
      "${here}/sim-binaries.sh" >/dev/null           # its configuration, if not copied yet
      ${cmd} "$@" || rc=$?
      progress_done "${what}" "${start}" "${rc}" ;;
    go-test) progress_step go-test "${what}" go_test "$@" ;;
    *) progress_step "${key}" "${what}" ${cmd} ;;
  esac
done
