#!/usr/bin/env bash
# kube-binaries.sh builds the control-plane binaries that tests and the local
# cluster use, from the Go module proxy at the versions pinned in
# hack/kubebin/go.mod, into a cache directory keyed by those versions.
# A second run finds them and returns at once.
#
# Usage: hack/kube-binaries.sh [BINARY...]   (default: etcd kube-apiserver kube-scheduler,
# what the tests run; kubectl mend explain is tested on the real scheduler's messages;
# hack/real-node.sh adds kube-controller-manager, kubelet and kube-proxy)
# Prints the directory holding the binaries as its last line.
# Environment: NODEMEND_CACHE (default ~/.cache/nodemend)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kube_version="v1.37.2"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "${here}/kubebin/go.mod")"
cache_root="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}"
bin_dir="${cache_root}/kubebin/kubernetes-${kube_version}_etcd-${etcd_version}_$(go env GOOS)-$(go env GOARCH)"

want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(etcd kube-apiserver kube-scheduler)

package_of() {
  case "$1" in
    etcd) echo "go.etcd.io/etcd/server/v3" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy) echo "k8s.io/kubernetes/cmd/$1" ;;
    *) echo "unknown binary $1 (known: etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)" >&2; return 1 ;;
  esac
}

# Version stamps, as the Kubernetes release build sets them, so that
# `kubectl version` and /version report the pinned release.
kube_ldflags() {
  local v="${kube_version#v}" major minor
  major="${v%%.*}"; minor="${v#*.}"; minor="${minor%%.*}"
  local f
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X ${pkg}.gitVersion=${kube_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    f+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w${f}"
}

mkdir -p "${bin_dir}"
for bin in "${want[@]}"; do
  pkg="$(package_of "${bin}")"
  if [[ -x "${bin_dir}/${bin}" ]]; then
    continue
  fi
  # One build of a binary at a time: callers that start together (test
  # packages, helpers, a second make) wait for the first build and take
  # its result instead of compiling the same thing again on the same cores.
  exec 9>"${bin_dir}/.${bin}.lock"
  flock 9
  if [[ -x "${bin_dir}/${bin}" ]]; then
    exec 9>&-
    continue
  fi
  echo "building ${bin} (${pkg}) into ${bin_dir} — first time only, a few minutes on 2 cores" >&2
  start=$(date +%s)
  ldflags="-s -w"
  [[ "${bin}" == etcd ]] || ldflags="$(kube_ldflags)"
  # Build to a temporary name of its own and rename, so an interrupted
  # build never leaves a half-written binary that a later run would trust,
  # and builds running at once do not take each other's file.
  tmp="$(mktemp "${bin_dir}/.${bin}.XXXXXX")"
  (cd "${here}/kubebin" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "${ldflags}" -o "${tmp}" "${pkg}") || { rm -f "${tmp}"; exit 1; }
  mv -f "${tmp}" "${bin_dir}/${bin}"
  echo "built ${bin} in $(( $(date +%s) - start ))s" >&2
  exec 9>&-
done
echo "${bin_dir}"
