#!/usr/bin/env bash
# Install Debian's chromium for the report's browser tests (tests/report) on a clean
# Debian machine (root). Playwright for Python drives it through executable_path; no
# browser is downloaded at test time.
#
# Idempotent: installs only when the binary is missing.
#
#   scripts/ci-chromium.sh        then: CI=1 pytest tests/report
#
# Env: KCTL_CHROMIUM (default /usr/bin/chromium), the binary the tests launch.
set -euo pipefail

chromium="${KCTL_CHROMIUM:-/usr/bin/chromium}"
log() { printf '[ci-chromium] %s\n' "$*" >&2; }

if [[ -x "$chromium" ]]; then
  log "chromium already installed: $("$chromium" --version 2>/dev/null || echo "$chromium")"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { log "need root to install chromium"; exit 1; }
log "installing chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
log "installed: $("$chromium" --version 2>/dev/null || echo "$chromium")"
