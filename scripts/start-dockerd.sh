#!/usr/bin/env bash
# Start the docker engine in the background unless one answers already (idempotent).
#
#   scripts/start-dockerd.sh        log: ${AGENTRT_DOCKERD_LOG:-/var/log/agentrt-dockerd.log}
#
# For machines without systemd (containers, CI): runs `dockerd` detached and waits until
# `docker info` answers (at most 60 s). Needs root and the docker.io package.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "start-dockerd: dockerd is not installed (apt-get install docker.io)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "start-dockerd: starting dockerd needs root" >&2
  exit 1
fi
log="${AGENTRT_DOCKERD_LOG:-/var/log/agentrt-dockerd.log}"
mkdir -p "$(dirname "$log")"
echo "start-dockerd: starting dockerd (log $log)"
setsid nohup dockerd >>"$log" 2>&1 </dev/null &
for _ in $(seq 600); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "start-dockerd: dockerd did not answer within 60 s; see $log" >&2
tail -n 20 "$log" >&2 || true
exit 1
