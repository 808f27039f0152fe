#!/usr/bin/env bash
# real-node.sh runs one real Kubernetes node on this machine — etcd,
# kube-apiserver (NodeRestriction), kube-scheduler, kube-controller-manager,
# containerd with runc and the CNI bridge plugin, a kubelet with its own
# system:node client certificate, kube-proxy — and installs nodemend's chart
# on it from the images `make images` built (docs/install.md, "Try it on a
# real node"). Needs root. Hold /tmp/nodemend-e2e.lock on a machine others
# share (flock /tmp/nodemend-e2e.lock hack/real-node.sh start).
#
#   hack/real-node.sh start [--values FILE]... [--no-chart]
#                           installs the Debian packages containerd, runc,
#                           containernetworking-plugins and iptables when
#                           missing; builds kubelet and kube-proxy like the
#                           other kube binaries (cached), helm and the images;
#                           prints the admin kubeconfig's path last
#   hack/real-node.sh stop  stops it and leaves the machine as start found it
#   hack/real-node.sh status
#
# Environment: NODEMEND_NODE_STATE_DIR (default _output/real-node),
# NODEMEND_NODE_PORT_BASE (default 36400; the node uses ports base..base+99),
# NODEMEND_NODE_SKIP_BUILD=1 (use the binaries and images already built).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
cd "${repo}"
cmd="${1:-}"
[[ -n "${cmd}" ]] || { echo "usage: $0 start|stop|status" >&2; exit 2; }
shift
bin="${repo}/_output/bin/real-node"

build_self() {
  mkdir -p "$(dirname "${bin}")"
  CGO_ENABLED=0 go build -o "${bin}" ./hack/real-node
}

case "${cmd}" in
  start)
    [[ $(id -u) -eq 0 ]] || { echo "real-node: run as root (the node creates links, mounts and cgroups)" >&2; exit 1; }
    missing=()
    for pkg in containerd runc containernetworking-plugins iptables; do
      dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" || missing+=("${pkg}")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
      echo "real-node: installing ${missing[*]} (apt-get)" >&2
      export DEBIAN_FRONTEND=noninteractive
      if ! { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
        echo "real-node: could not install ${missing[*]} with apt-get; install them by hand and start again" >&2
        exit 1
      fi
    fi
    if [[ "${NODEMEND_NODE_SKIP_BUILD:-}" != 1 ]]; then
      make --no-print-directory images >&2
    fi
    kubebin="$("${here}/kube-binaries.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy | tail -1)"
    helm="$("${here}/helm.sh" | tail -1)"
    mock="$("${here}/metadata-mock.sh" | tail -1)"
    build_self
    exec "${bin}" start --kube-bin "${kubebin}" --helm "${helm}" --metadata-mock "${mock}" "$@"
    ;;
  stop|status)
    build_self
    exec "${bin}" "${cmd}" "$@"
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
