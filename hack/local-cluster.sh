#!/usr/bin/env bash
# local-cluster.sh runs a local Kubernetes control plane — etcd and
# kube-apiserver, built by hack/kube-binaries.sh — in the background.
#
#   hack/local-cluster.sh start   start it (or reuse a running one); the last
#                                 line printed is the admin kubeconfig's path
#   hack/local-cluster.sh stop    stop exactly the processes 'start' started
#   hack/local-cluster.sh status  say whether it runs
#
# Environment:
#   NODEMEND_CLUSTER_DIR  state directory (default: _output/local-cluster)
#   NODEMEND_ETCD_PORT    etcd client port (default 23790; peer port +1)
#   NODEMEND_API_PORT     kube-apiserver port (default 26443)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
dir="${NODEMEND_CLUSTER_DIR:-${repo}/_output/local-cluster}"
etcd_port="${NODEMEND_ETCD_PORT:-23790}"
api_port="${NODEMEND_API_PORT:-26443}"
pki="${dir}/pki"
logs="${dir}/logs"
pids="${dir}/pids"
kubeconfig="${dir}/admin.kubeconfig"

log() { echo "local-cluster: $*" >&2; }

# alive PIDFILE BINARY: the recorded process still runs and is that binary
# (a recycled PID of another program is never signalled).
alive() {
  local pidfile="$1" bin="$2" pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(cat "${pidfile}")"
  [[ -r "/proc/${pid}/cmdline" ]] || return 1
  tr '\0' ' ' < "/proc/${pid}/cmdline" | grep -q -- "${bin}"
}

make_pki() {
  [[ -f "${pki}/admin.crt" ]] && return 0
  log "creating certificates in ${pki}"
  mkdir -p "${pki}"
  (
    cd "${pki}"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=nodemend-local-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    cat > apiserver.ext <<EXT
subjectAltName = DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, IP:127.0.0.1, IP:10.96.0.1
extendedKeyUsage = serverAuth
EXT
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    echo "extendedKeyUsage = clientAuth" > client.ext
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=nodemend-admin" -keyout admin.key -out admin.csr 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() {
  cat > "${kubeconfig}" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:${api_port}
    certificate-authority: ${pki}/ca.crt
users:
- name: admin
  user:
    client-certificate: ${pki}/admin.crt
    client-key: ${pki}/admin.key
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
KC
  chmod 600 "${kubeconfig}"
}

wait_ready() {
  local deadline=$((SECONDS + 90))
  until curl -sf --cacert "${pki}/ca.crt" --cert "${pki}/admin.crt" --key "${pki}/admin.key" \
      "https://127.0.0.1:${api_port}/readyz" >/dev/null 2>&1; do
    if ! alive "${pids}/kube-apiserver.pid" kube-apiserver; then
      log "kube-apiserver exited; last lines of ${logs}/kube-apiserver.log:"
      tail -20 "${logs}/kube-apiserver.log" >&2
      return 1
    fi
    if (( SECONDS > deadline )); then
      log "kube-apiserver did not become ready in 90s; see ${logs}/kube-apiserver.log"
      return 1
    fi
    sleep 0.5
  done
}

start() {
  command -v openssl >/dev/null || { log "openssl is required (apt-get install openssl)"; exit 1; }
  command -v curl >/dev/null || { log "curl is required (apt-get install curl)"; exit 1; }
  local bins
  bins="$("${here}/kube-binaries.sh" etcd kube-apiserver | tail -1)"
  mkdir -p "${logs}" "${pids}"
  make_pki
  write_kubeconfig

  if alive "${pids}/etcd.pid" etcd; then
    log "etcd already running (pid $(cat "${pids}/etcd.pid"))"
  else
    mkdir -p "${dir}/etcd-data"
    "${bins}/etcd" --name local --data-dir "${dir}/etcd-data" \
      --listen-client-urls "http://127.0.0.1:${etcd_port}" --advertise-client-urls "http://127.0.0.1:${etcd_port}" \
      --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
      --initial-cluster "local=http://127.0.0.1:$((etcd_port + 1))" \
      --unsafe-no-fsync --quota-backend-bytes 4294967296 \
      >"${logs}/etcd.log" 2>&1 &
    echo $! > "${pids}/etcd.pid"
    log "etcd started (pid $!, log ${logs}/etcd.log)"
  fi

  if alive "${pids}/kube-apiserver.pid" kube-apiserver; then
    log "kube-apiserver already running (pid $(cat "${pids}/kube-apiserver.pid"))"
  else
    "${bins}/kube-apiserver" \
      --etcd-servers "http://127.0.0.1:${etcd_port}" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "${api_port}" \
      --tls-cert-file "${pki}/apiserver.crt" --tls-private-key-file "${pki}/apiserver.key" \
      --client-ca-file "${pki}/ca.crt" \
      --service-account-key-file "${pki}/sa.pub" --service-account-signing-key-file "${pki}/sa.key" \
      --service-account-issuer https://kubernetes.default.svc \
      --service-cluster-ip-range 10.96.0.0/16 \
      --authorization-mode Node,RBAC --allow-privileged --endpoint-reconciler-type none \
      >"${logs}/kube-apiserver.log" 2>&1 &
    echo $! > "${pids}/kube-apiserver.pid"
    log "kube-apiserver started (pid $!, log ${logs}/kube-apiserver.log)"
  fi
  wait_ready
  log "API ready at https://127.0.0.1:${api_port}"
  echo "${kubeconfig}"
}

stop() {
  local name pidfile pid
  for name in kube-apiserver etcd; do
    pidfile="${pids}/${name}.pid"
    if alive "${pidfile}" "${name}"; then
      pid="$(cat "${pidfile}")"
      kill "${pid}"
      for _ in $(seq 1 50); do alive "${pidfile}" "${name}" || break; sleep 0.2; done
      if alive "${pidfile}" "${name}"; then kill -9 "${pid}"; fi
      log "stopped ${name} (pid ${pid})"
    fi
    rm -f "${pidfile}"
  done
}

status() {
  local name rc=0
  for name in etcd kube-apiserver; do
    if alive "${pids}/${name}.pid" "${name}"; then
      echo "${name}: running (pid $(cat "${pids}/${name}.pid"))"
    else
      echo "${name}: stopped"; rc=1
    fi
  done
  return ${rc}
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
