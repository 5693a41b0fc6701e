#!/usr/bin/env bash
# Build the base image of agentrt's image from Debian's packages, unless it is there.
#
#   scripts/docker-base-image.sh [TAG]     (TAG default: agentrt-base:bookworm)
#
# No image registry is needed: debootstrap assembles a minimal Debian bookworm root filesystem
# from Debian's archive (Python 3.11 and its venv module, CA certificates, bubblewrap and tini
# for the tools image), and `docker import` loads it. The image is labelled with a hash of this
# script; one whose label matches is left alone, so running this again is free. The public
# equivalent is python:3.11-slim-bookworm, the Dockerfile's default BASE.
#
# Needs: root, a running engine (scripts/start-dockerd.sh), debootstrap (installed with apt-get
# when missing), and Debian's archive (AGENTRT_DEBIAN_MIRROR, default deb.debian.org).
set -euo pipefail

tag="${1:-agentrt-base:bookworm}"
mirror="${AGENTRT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages="python3,python3-venv,ca-certificates,bubblewrap,tini"
recipe="$( (cat "$0"; echo "$mirror") | sha256sum | cut -c1-16)"

if ! docker info >/dev/null 2>&1; then
  echo "docker-base-image: the docker engine is not reachable (scripts/start-dockerd.sh starts it)" >&2
  exit 1
fi
have="$(docker image inspect -f '{{ index .Config.Labels "agentrt.recipe" }}' "$tag" 2>/dev/null || true)"
if [ "$have" = "$recipe" ]; then
  echo "docker-base-image: $tag is up to date"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "docker-base-image: debootstrap needs root" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "docker-base-image: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
fi

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
echo "docker-base-image: debootstrap bookworm ($packages) from $mirror"
started=$SECONDS
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -n 30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# What an image does not need: package caches and lists, documentation, the build's logs.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"

tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL agentrt.recipe=$recipe" \
  - "$tag" >/dev/null
echo "docker-base-image: built $tag in $((SECONDS - started)) s (recipe $recipe)"
