#!/usr/bin/env bash
# kube-binaries.sh builds the control-plane binaries that tests and the local
# cluster use, from the Go module proxy at the versions pinned in
# hack/kubebin/go.mod, into a cache directory keyed by those versions.
# A second run finds them and returns at once.
#
# Usage: hack/kube-binaries.sh [--missing] [BINARY...]   (default: etcd kube-apiserver kube-scheduler,
# what the tests run; kubectl mend explain is tested on the real scheduler's messages;
# hack/real-node.sh adds kube-controller-manager, kubelet and kube-proxy)
# Prints the directory holding the binaries as its last line.
# Environment: NODEMEND_CACHE (default ~/.cache/nodemend); NODEMEND_STEP ("i/n",
# hack/prepare.sh's plan) numbers the progress line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kube_version="v1.37.2"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "${here}/kubebin/go.mod")"
cache_root="${NODEMEND_CACHE:-${HOME}/.cache/nodemend}"
# The directory is keyed by the pins and by the rest of kubebin's module
# graph (hack/kubebin-align.sh raises it to the main module's), so that any
# change of go.mod builds again.
graph="$(sha256sum "${here}/kubebin/go.mod" | cut -c1-12)"
bin_dir="${cache_root}/kubebin/kubernetes-${kube_version}_etcd-${etcd_version}_deps-${graph}_$(go env GOOS)-$(go env GOARCH)"

# --missing: print the requested binaries that are not built yet, one a
# line, and build nothing (hack/prepare.sh plans with it).
query=false
if [[ "${1:-}" == --missing ]]; then query=true; shift; fi
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

missing=()
pkgs=()
for bin in "${want[@]}"; do
  pkg="$(package_of "${bin}")"
  [[ -x "${bin_dir}/${bin}" ]] && continue
  missing+=("${bin}")
  pkgs+=("${pkg}")
done

if [[ "${query}" == true ]]; then
  printf '%s\n' "${missing[@]}"
  exit 0
fi
mkdir -p "${bin_dir}"
if [[ ${#missing[@]} -gt 0 ]]; then
  # One build at a time: callers that start together (test packages,
  # helpers, a second make) wait for the first build and take its result
  # instead of compiling the same thing again on the same cores. After the
  # wait, only what is still missing is built.
  exec 9>"${bin_dir}/.build.lock"
  flock 9
  still=()
  stillpkgs=()
  for i in "${!missing[@]}"; do
    [[ -x "${bin_dir}/${missing[$i]}" ]] && continue
    still+=("${missing[$i]}")
    stillpkgs+=("${pkgs[$i]}")
  done
  missing=("${still[@]}")
  pkgs=("${stillpkgs[@]}")
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  # One go build for every missing binary: the go command schedules all
  # their packages over the cores at once, so one binary's link and its
  # last, largest packages (which keep only one core busy) overlap with the
  # others' compiling, instead of running one binary after the other.
  # The -X stamps name packages etcd does not link; the linker ignores them.
  # Into a temporary directory of its own, renamed when complete, so an
  # interrupted build never leaves a half-written binary that a later run
  # would trust, and builds running at once do not take each other's files.
  tmp="$(mktemp -d "${bin_dir}/.build.XXXXXX")"
  trap 'rm -rf "${tmp}"' EXIT
  # Built as `go test` builds (the default cgo setting, no -trimpath), so
  # that the packages the tests share with the control plane, compiled here
  # at the same versions (hack/kubebin-align.sh), are found in the build
  # cache by `make test` instead of compiled again: 673 of the 1,078
  # packages the tests import from other modules.
  build() {
    (cd "${here}/kubebin" && GOFLAGS="${GOFLAGS:+${GOFLAGS} }-mod=mod" \
      go build -ldflags "$(kube_ldflags)" -o "${tmp}/" "${pkgs[@]}")
  }
  # shellcheck source=lib/progress.sh
  source "${here}/lib/progress.sh"
  progress_step "$(progress_kube_key "${missing[@]}")" "building ${missing[*]} (Kubernetes ${kube_version}, etcd ${etcd_version}) from source into the cache" build
  for i in "${!missing[@]}"; do
    # go build names a binary after its package path's last element, or the
    # one before a major version suffix (go.etcd.io/etcd/server/v3: server).
    out="${pkgs[$i]##*/}"
    [[ "${out}" =~ ^v[0-9]+$ ]] && { out="${pkgs[$i]%/*}"; out="${out##*/}"; }
    mv -f "${tmp}/${out}" "${bin_dir}/${missing[$i]}"
  done
  exec 9>&-
fi
echo "${bin_dir}"
