#!/usr/bin/env bash
# Build the docker sandbox image and import it into the local engine, unless it is there.
#
#   scripts/docker-sandbox-image.sh [TAG]     (TAG default: $AGENTRT_TOOLS_DOCKER_IMAGE or agentrt-sandbox:1)
#
# No registry is needed: the root filesystem is assembled from this machine (busybox-static,
# the host's bash with the shared libraries ldd names, and scripts/agentrt-exec.c compiled
# static) and loaded with `docker import`. The image is labelled with a hash of its recipe
# (this script and the helper's source); an image whose label differs is rebuilt, one whose
# label matches is left alone, so running this again is free.
#
# Needs: a running engine (scripts/start-dockerd.sh), gcc with a static libc, busybox-static
# (installed with apt-get when missing and running as root).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tag="${1:-${AGENTRT_TOOLS_DOCKER_IMAGE:-agentrt-sandbox:1}}"
helper_src="$here/agentrt-exec.c"
recipe="$(cat "$0" "$helper_src" | sha256sum | cut -c1-16)"

if ! docker info >/dev/null 2>&1; then
  echo "docker-sandbox-image: the docker engine is not reachable (scripts/start-dockerd.sh starts it)" >&2
  exit 1
fi
have="$(docker image inspect -f '{{ index .Config.Labels "agentrt.recipe" }}' "$tag" 2>/dev/null || true)"
if [ "$have" = "$recipe" ]; then
  echo "docker-sandbox-image: $tag is up to date"
  exit 0
fi

busybox=""
for candidate in /bin/busybox /usr/bin/busybox; do
  if [ -x "$candidate" ] && ! ldd "$candidate" >/dev/null 2>&1; then
    busybox="$candidate"
  fi
done
if [ -z "$busybox" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "docker-sandbox-image: installing busybox-static"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
    busybox=/bin/busybox
  else
    echo "docker-sandbox-image: busybox-static is missing (apt-get install busybox-static)" >&2
    exit 1
  fi
fi
command -v gcc >/dev/null || { echo "docker-sandbox-image: gcc is missing" >&2; exit 1; }

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,.agentrt,etc,root,tmp,proc,sys,dev}
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"
cp "$busybox" "$root/bin/busybox"
# Every applet as a symlink at its usual place (/bin/sh, /bin/ls, /usr/bin/env, /sbin/ip, ...).
"$busybox" --list-full | while read -r applet; do
  [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done
# bash (exec_command runs `bash -c`) with the libraries and loader it links against.
bash_bin="$(readlink -f "$(command -v bash)")"
cp "$bash_bin" "$root/bin/bash"
for lib in $(ldd "$bash_bin" | grep -o '/[^ ]*'); do
  cp -L --parents "$lib" "$root"
done
gcc -static -O2 -s -o "$root/.agentrt/agentrt-exec" "$helper_src"
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
PASSWD
cat > "$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
echo "127.0.0.1 localhost" > "$root/etc/hosts"

tar -C "$root" --numeric-owner --owner=0 --group=0 -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/sh"]' \
  --change "LABEL agentrt.recipe=$recipe" \
  - "$tag" >/dev/null
echo "docker-sandbox-image: built $tag (recipe $recipe)"
