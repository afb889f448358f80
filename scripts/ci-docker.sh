#!/usr/bin/env bash
# Bring up a Docker engine for kctl's docker tests on a clean Debian 12 machine (root).
#
# Idempotent: installs docker.io and debootstrap only when missing, starts dockerd only when
# no engine answers, builds the test base image only when it is absent.
# dockerd runs without a bridge and without iptables rules: kctl's containers use host
# networking on 127.0.0.1, so the host's firewall is never touched.
#
#   scripts/ci-docker.sh          then: CI=1 pytest -m docker tests/docker
#
# Env: KCTL_DOCKERD_LOG (default /tmp/kctl-dockerd.log), KCTL_TEST_BASE_IMAGE
# (default kctl-test-base:bookworm).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dockerd_log="${KCTL_DOCKERD_LOG:-/tmp/kctl-dockerd.log}"
base_image="${KCTL_TEST_BASE_IMAGE:-kctl-test-base:bookworm}"

log() { printf '[ci-docker] %s\n' "$*" >&2; }

need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
if ((${#need_pkgs[@]})); then
  [[ $(id -u) -eq 0 ]] || { log "need root to install ${need_pkgs[*]}"; exit 1; }
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  log "docker engine already reachable"
else
  log "starting dockerd (logs: $dockerd_log)"
  # setsid: dockerd must outlive this script and not receive the CI shell's signals.
  setsid dockerd --bridge=none --iptables=false --ip6tables=false \
    >"$dockerd_log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    log "dockerd did not come up within 60 s; last log lines:"
    tail -n 30 "$dockerd_log" >&2 || true
    exit 1
  fi
  log "docker engine up: $(docker version --format '{{.Server.Version}}')"
fi

"$here/build-base-image.sh" "$base_image"
