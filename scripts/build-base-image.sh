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
# Bump when the package list changes: an image with an older revision is rebuilt.
revision=2

log() { printf '[build-base-image] %s\n' "$*" >&2; }

have="$(docker image inspect --format '{{index .Config.Labels "kctl.test-base"}}' "$tag" 2>/dev/null || true)"
if [[ $force -eq 0 && "$have" == "$revision" ]]; then
  log "$tag (revision $revision) already present; skipping (use --force to rebuild)"
  exit 0
fi

command -v debootstrap >/dev/null || { log "debootstrap not found (apt-get install -y debootstrap)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { log "debootstrap needs root"; exit 1; }

work="$(mktemp -d /tmp/kctl-rootfs.XXXXXX)"
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT

start=$SECONDS
log "debootstrap bookworm (minbase + python3, pip, setuptools, wheel) into $work"
# minbase keeps the image small. python3 (not -minimal) is what the simulator needs;
# pip, setuptools and wheel let the tests build a kernel-profile image offline, the way
# the real image compiles kernels/ (pip wheel --no-build-isolation, then pip install).
debootstrap --variant=minbase --include=python3,python3-pip,python3-setuptools,python3-wheel,ca-certificates \
  bookworm "$work/rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Drop caches that only bloat the image.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*

log "docker import as $tag"
tar -C "$work/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL kctl.test-base=$revision" \
  - "$tag" >/dev/null
log "done in $((SECONDS - start)) s: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$tag")"
