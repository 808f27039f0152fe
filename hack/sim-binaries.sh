#!/usr/bin/env bash
# sim-binaries.sh builds the local simulation's Go 1.27 components — kwok and
# Karpenter's kwok cloud provider, pinned in tools/go.mod — into a cache keyed
# by their versions, plus kube-scheduler and kube-controller-manager through
# hack/kube-binaries.sh. Prints the directory of the simulation binaries last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${here}/../tools"
# The Go 1.27 modules' toolchain, for this script's own go commands only:
# the control plane below is built with the project's toolchain, as
# `make test` builds it, so that its packages come from the same build
# cache; with Go 1.27 they would all compile a second time (kube-controller-
# manager took 612 s that way in the first measured cold `make demo`).
caller_toolchain="${GOTOOLCHAIN-}"
export GOTOOLCHAIN=go1.27.3
karpenter="$(awk '$1=="sigs.k8s.io/karpenter"{print $2}' "${tools}/go.mod")"
kwok="$(awk '$1=="sigs.k8s.io/kwok"{print $2}' "${tools}/go.mod")"
dir="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}/simbin/karpenter-${karpenter}_kwok-${kwok}"
# --missing: print kwok and karpenter-kwok if not built yet, build nothing.
if [[ "${1:-}" == --missing ]]; then
  for b in kwok karpenter-kwok; do [[ -x "${dir}/${b}" ]] || echo "${b}"; done
  exit 0
fi
mkdir -p "${dir}"
# shellcheck source=lib/progress.sh
source "${here}/lib/progress.sh"
build() { # NAME PACKAGE
  local tmp
  tmp="$(mktemp "${dir}/.$1.XXXXXX")" # its own name: builds running at once do not take each other's file
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}" "$2") || { rm -f "${tmp}"; return 1; }
  mv -f "${tmp}" "${dir}/$1"
}
# Both in one step: the second shares most of its packages with the first.
build_tools() {
  [[ -x "${dir}/kwok" ]] || build kwok sigs.k8s.io/kwok/cmd/kwok
  [[ -x "${dir}/karpenter-kwok" ]] || build karpenter-kwok sigs.k8s.io/karpenter/kwok
}
if [[ ! -x "${dir}/kwok" || ! -x "${dir}/karpenter-kwok" ]]; then
  progress_step sim-tools "building kwok ${kwok} and Karpenter ${karpenter} (kwok provider) with Go 1.27 into the cache" build_tools
fi
# Configuration that ships with those modules, taken from the same pinned
# module versions: Karpenter's CRDs (with the kwok node class) and kwok's
# stages (fake kubelet behaviour: node initialize + lease heartbeat, pods
# become ready, complete, and are removed once deleted).
if [[ ! -f "${dir}/.config-done" ]]; then
  karpdir="$(cd "${tools}" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  kwokdir="$(cd "${tools}" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  rm -rf "${dir}/crds" "${dir}/kwok-stages"
  mkdir -p "${dir}/crds" "${dir}/kwok-stages"
  cp "${karpdir}"/kwok/charts/crds/*.yaml "${karpdir}"/kwok/apis/crds/*.yaml "${dir}/crds/"
  cp "${kwokdir}"/kustomize/stage/node/fast/node-initialize.yaml \
     "${kwokdir}"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "${kwokdir}"/kustomize/stage/pod/fast/pod-*.yaml "${dir}/kwok-stages/"
  chmod -R u+w "${dir}/crds" "${dir}/kwok-stages"
  touch "${dir}/.config-done"
fi
if [[ -n "${caller_toolchain}" ]]; then
  GOTOOLCHAIN="${caller_toolchain}" "${here}/kube-binaries.sh" kube-scheduler kube-controller-manager >/dev/null
else
  env -u GOTOOLCHAIN "${here}/kube-binaries.sh" kube-scheduler kube-controller-manager >/dev/null
fi
echo "${dir}"
