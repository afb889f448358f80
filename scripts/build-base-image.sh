#!/usr/bin/env bash
# Build the small Debian bookworm + python3 base image the Docker tests build FROM.
#
# There is no image registry in CI, so the rootfs comes from debootstrap and enters the
# engine through `docker import`. Idempotent: does nothing when the tag already exists
# (pass --force to rebuild). Needs root (debootstrap) and a reachable Docker engine.
#
#   scripts/build-base-image.sh [--force] [TAG]        default TAG: kctl-test-base:bookworm
#
# Env: KCTL_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

force=0
if [[ "${1:-}" == "--force" ]]; then
  force=1
  shift
fi
tag="${1:-kctl-test-base:bookworm}"
mirror="${KCTL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { printf '[build-base-image] %s\n' "$*" >&2; }

if [[ $force -eq 0 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
  log "$tag already present; skipping (use --force to rebuild)"
  exit 0
fi

command -v debootstrap >/dev/null || { log "debootstrap not found (apt-get install -y debootstrap)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { log "debootstrap needs root"; exit 1; }

work="$(mktemp -d /tmp/kctl-rootfs.XXXXXX)"
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT

start=$SECONDS
log "debootstrap bookworm (minbase + python3) into $work"
# minbase keeps the image small; python3-minimal is not enough for http.server + json,
# the full python3 package is what the simulator needs.
debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$work/rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Drop caches that only bloat the image.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*

log "docker import as $tag"
tar -C "$work/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null
log "done in $((SECONDS - start)) s: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$tag")"
