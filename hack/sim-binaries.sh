#!/usr/bin/env bash
# sim-binaries.sh builds the local simulation's Go 1.27 components — kwok and
# Karpenter's kwok cloud provider, pinned in tools/go.mod — into a cache keyed
# by their versions, plus kube-scheduler and kube-controller-manager through
# hack/kube-binaries.sh. Prints the directory of the simulation binaries last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${here}/../tools"
export GOTOOLCHAIN=go1.27.3
karpenter="$(awk '$1=="sigs.k8s.io/karpenter"{print $2}' "${tools}/go.mod")"
kwok="$(awk '$1=="sigs.k8s.io/kwok"{print $2}' "${tools}/go.mod")"
dir="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}/simbin/karpenter-${karpenter}_kwok-${kwok}"
mkdir -p "${dir}"
build() { # NAME PACKAGE
  [[ -x "${dir}/$1" ]] && return 0
  echo "building $1 (${2}) — first time only, several minutes on 2 cores" >&2
  local start=$SECONDS
  local tmp
  tmp="$(mktemp "${dir}/.$1.XXXXXX")" # its own name: builds running at once do not take each other's file
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}" "$2") || { rm -f "${tmp}"; return 1; }
  mv -f "${tmp}" "${dir}/$1"
  echo "built $1 in $((SECONDS - start))s" >&2
}
build kwok sigs.k8s.io/kwok/cmd/kwok
build karpenter-kwok sigs.k8s.io/karpenter/kwok
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
"${here}/kube-binaries.sh" kube-scheduler kube-controller-manager >/dev/null
echo "${dir}"
