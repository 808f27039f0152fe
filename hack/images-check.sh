#!/usr/bin/env bash
# images-check.sh proves that the archives `make images` wrote import into
# containerd and run there: it starts a private containerd (its own root,
# state and socket in a temporary directory; containerd and runc from
# Debian packages, installed when missing), imports every archive with
# `ctr -n k8s.io images import` as the real-node tier does, checks each
# image's digest and the user containerd runs it as against images.txt,
# and runs them:
#   nodemend-agent          --help, as root, and the host tools it runs
#                           (journalctl, tcpdump, iptables-save, nft, conntrack, ss)
#   nodemend-controller     --help
#   kubectl-mend            --help
#   nodemend-test-workload  its identity (uid 65532), then serving until SIGTERM, exit 0
#   nodemend-pause          running until SIGTERM, exit 0
# It holds the e2e lock (/tmp/nodemend-e2e.lock) while containerd runs —
# unless a caller up the process tree holds it already — and leaves no
# process, mount, cgroup or file behind, whatever happens.
#
# Usage: hack/images-check.sh [IMAGES_DIR]   (default _output/images)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
images_dir="${1:-_output/images}"
[[ -f "${images_dir}/images.txt" ]] || { echo "images-check: no ${images_dir}/images.txt; run make images first" >&2; exit 1; }

need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [[ ${#need[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "images-check: please install ${need[*]} (apt-get install ${need[*]})" >&2; exit 1
  fi
  echo "images-check: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[[ $(id -u) -eq 0 ]] || { echo "images-check: containerd needs root" >&2; exit 1; }

# The e2e lock, unless an ancestor (flock … make …) holds it: a flock
# lock is listed in /proc/locks with the PID that took it.
lock=/tmp/nodemend-e2e.lock
held_by_ancestor() {
  [[ -e "${lock}" ]] || return 1
  local inode pid
  inode="$(stat -c %i "${lock}")"
  pid=$$
  while [[ "${pid}" -gt 1 ]]; do
    if awk -v p="${pid}" -v i="${inode}" '$2=="FLOCK" && $5==p && $6 ~ (":" i "$") {found=1} END {exit !found}' /proc/locks; then
      return 0
    fi
    pid="$(awk '{print $4}' "/proc/${pid}/stat")"
  done
  return 1
}
if ! held_by_ancestor; then
  exec 9>>"${lock}"
  if ! flock -n 9; then
    echo "images-check: waiting for ${lock} (a simulation or real-node run holds it)" >&2
    flock 9
  fi
fi

tmp="$(mktemp -d /tmp/nodemend-images-check.XXXXXX)"
# Containers' cgroups go under a parent of this run's own, removed at the end.
cgroup_parent="/$(basename "${tmp}")"
sock="${tmp}/containerd.sock"
containerd_pid=""
ctr() { command ctr --address "${sock}" --namespace k8s.io "$@"; }

cleanup() {
  local rc=$?
  set +e
  if [[ -n "${containerd_pid}" ]]; then
    for task in $(ctr tasks ls -q 2>/dev/null); do
      ctr tasks kill -s SIGKILL "${task}" >/dev/null 2>&1
      ctr tasks delete -f "${task}" >/dev/null 2>&1
    done
    for c in $(ctr containers ls -q 2>/dev/null); do ctr containers delete "${c}" >/dev/null 2>&1; done
    kill -TERM "${containerd_pid}" 2>/dev/null
    for _ in $(seq 100); do kill -0 "${containerd_pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${containerd_pid}" 2>/dev/null
    wait "${containerd_pid}" 2>/dev/null
  fi
  # Shims and container processes this containerd started name its
  # directory on their command line; end those, by PID.
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"${p}/cmdline"; } 2>/dev/null | grep -qF "${tmp}/"; then
      kill -KILL "${p#/proc/}" 2>/dev/null
    fi
  done
  for d in /sys/fs/cgroup/*"${cgroup_parent}"; do
    [[ -d "${d}" ]] && find "${d}" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # Unmount what is left under the directory, deepest first.
  awk -v d="${tmp}/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "${m}"; done
  if [[ ${rc} -ne 0 && -f "${tmp}/containerd.log" ]]; then
    echo "--- containerd log (last 30 lines)" >&2; tail -30 "${tmp}/containerd.log" >&2
  fi
  rm -rf "${tmp}"
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"${tmp}/config.toml" <<EOF
version = 2
root = "${tmp}/root"
state = "${tmp}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${sock}"
[ttrpc]
  address = "${sock}.ttrpc"
[debug]
  address = "${tmp}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "${tmp}/opt"
EOF
containerd --config "${tmp}/config.toml" >"${tmp}/containerd.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 150); do
  ctr version >/dev/null 2>&1 && break
  kill -0 "${containerd_pid}" 2>/dev/null || { echo "images-check: containerd exited" >&2; exit 1; }
  sleep 0.2
done
ctr version >/dev/null || { echo "images-check: containerd did not answer on ${sock}" >&2; exit 1; }
snapshotter=overlayfs
if ! ctr plugins ls | awk '$2=="overlayfs" && $4=="ok" {found=1} END {exit !found}'; then
  snapshotter=native # a file system overlayfs cannot sit on
fi
echo "images-check: containerd $(containerd --version | awk '{print $3}') (pid ${containerd_pid}, snapshotter ${snapshotter}), runc $(runc --version | awk 'NR==1{print $3}')"

fail() { echo "images-check: FAIL: $*" >&2; exit 1; }

# images.txt: NAME REF DIGEST USER ARCHIVE, one image a line.
mapfile -t images <"${images_dir}/images.txt"
declare -A ref_of
for line in "${images[@]}"; do
  read -r name ref digest user archive <<<"${line}"
  ctr images import --snapshotter "${snapshotter}" "${images_dir}/${archive}" >/dev/null || fail "importing ${archive}"
  got="$(ctr images ls | awk -v r="${ref}" '$1==r {print $3}')"
  [[ "${got}" == "${digest}" ]] || fail "${ref}: imported digest '${got}', images.txt says ${digest}"
  ref_of[${name}]="${ref}"
  # The user containerd gives the container's process, from the image config.
  ctr containers create --snapshotter "${snapshotter}" "${ref}" "user-${name}" >/dev/null
  info="$(ctr containers info "user-${name}")"
  ctr containers delete "user-${name}" >/dev/null
  uid="$(grep -m1 -oE '"uid": [0-9]+' <<<"${info}" | grep -oE '[0-9]+$')"
  gid="$(grep -m1 -oE '"gid": [0-9]+' <<<"${info}" | grep -oE '[0-9]+$')"
  [[ "${uid}:${gid}" == "${user}" ]] || fail "${ref}: containerd runs it as ${uid}:${gid}, the image declares ${user}"
  echo "imported ${ref} ${digest}, runs as ${uid}:${gid}"
done

n=0
# run NAME EXPECTED-OUTPUT-REGEX COMMAND...: a container of image NAME
# runs COMMAND as the image's user and must exit 0 printing EXPECTED.
run() {
  local image="$1" want="$2"; shift 2
  local ref="${ref_of[${image}]:-}" out
  [[ -n "${ref}" ]] || return 0
  n=$((n + 1))
  out="$(ctr run --rm --snapshotter "${snapshotter}" --cgroup "${cgroup_parent}/check-${n}" "${ref}" "check-${n}" "$@" 2>&1)" || fail "${image}: $* exited $?: ${out}"
  grep -qE -- "${want}" <<<"${out}" || fail "${image}: $*: output lacks /${want}/: ${out}"
  echo "ran ${image}: $* → $(grep -m1 -E -- "${want}" <<<"${out}")"
}

# stop_with_sigterm NAME COMMAND...: a container of image NAME runs until
# it gets SIGTERM and must then exit 0.
stop_with_sigterm() {
  local image="$1"; shift
  local ref="${ref_of[${image}]:-}" id status
  [[ -n "${ref}" ]] || return 0
  n=$((n + 1)); id="check-${n}"
  ctr run --rm --snapshotter "${snapshotter}" --cgroup "${cgroup_parent}/${id}" "${ref}" "${id}" "$@" >"${tmp}/${id}.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    ctr tasks ls | awk -v i="${id}" '$1==i && $3=="RUNNING" {found=1} END {exit !found}' && break
    sleep 0.1
  done
  ctr tasks ls | awk -v i="${id}" '$1==i && $3=="RUNNING" {found=1} END {exit !found}' || fail "${image}: not running: $(cat "${tmp}/${id}.out")"
  sleep 0.5 # the process installs its signal handlers
  ctr tasks kill -s SIGTERM "${id}"
  status=0; wait "${pid}" || status=$?
  [[ ${status} -eq 0 ]] || fail "${image}: exited ${status} on SIGTERM: $(cat "${tmp}/${id}.out")"
  echo "ran ${image}: running until SIGTERM, then exit 0 ($(tail -1 "${tmp}/${id}.out"))"
}

run nodemend-agent 'nodemend-agent runs on every node' /usr/local/bin/nodemend-agent --help
run nodemend-agent '^0$' id -u
run nodemend-agent 'systemd 2[0-9][0-9]' journalctl --version
run nodemend-agent 'tcpdump version' tcpdump --version
run nodemend-agent 'iptables' iptables-save --version
run nodemend-agent 'nftables v' nft --version
run nodemend-agent 'conntrack v' conntrack --version
run nodemend-agent 'iproute2' ss --version
run nodemend-controller 'Usage' /nodemend-controller --help
run kubectl-mend 'Usage' /kubectl-mend --help
run nodemend-test-workload '^uid=65532 gid=65532 ' /nodemend-test-workload --identity
run nodemend-pause 'nodemend-pause' /pause -v
stop_with_sigterm nodemend-test-workload /nodemend-test-workload --listen 127.0.0.1:8080
stop_with_sigterm nodemend-pause /pause
echo "images-check: ${#images[@]} images imported, ${n} containers ran"
