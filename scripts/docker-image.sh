#!/usr/bin/env bash
# Build agentrt's images here, without a registry, unless they are up to date.
#
#   scripts/docker-image.sh [TAG]     (TAG default: $AGENTRT_IMAGE_TAG or local)
#
# Builds deploy/Dockerfile twice: target `mesh` as agentrt:TAG (runs, gateway, sessions,
# tasks) and target `tools` as agentrt-tools:TAG; with the local base also agentrt-postgres:TAG
# (deploy/postgres/, PostgreSQL for deploy/compose.yaml where the public image cannot be pulled). BASE is $AGENTRT_IMAGE_BASE when set (e.g.
# python:3.11-slim-bookworm where a registry is reachable), else the local agentrt-base
# image that scripts/docker-base-image.sh builds from Debian's packages. The Python packages
# come from a wheelhouse made on the host with pip (kept in ~/.cache/agentrt-wheelhouse/,
# one per pyproject.toml), so the build needs no index.
#
# Caching: both images carry a label hashing their recipe (this script, the Dockerfile,
# .dockerignore, pyproject.toml, every file under services/, the base image's id); when
# both labels match, nothing is built. Otherwise docker's layer cache keeps the dependency
# layer while only the code changed, so a rebuild after a code change takes seconds; a first
# build takes a few minutes (most of it the base).
set -euo pipefail

cd "$(dirname "$0")/.."
tag="${1:-${AGENTRT_IMAGE_TAG:-local}}"
export DOCKER_BUILDKIT=0  # the engine's classic builder: no buildx plugin, no frontend image to pull

if ! docker info >/dev/null 2>&1; then
  echo "docker-image: the docker engine is not reachable (scripts/start-dockerd.sh starts it)" >&2
  exit 1
fi
base="${AGENTRT_IMAGE_BASE:-}"
if [ -z "$base" ]; then
  base="agentrt-base:bookworm"
  scripts/docker-base-image.sh "$base"
fi
# Without a registry, compose's PostgreSQL comes from a local stand-in (deploy/postgres/).
if [ -z "${AGENTRT_IMAGE_BASE:-}" ]; then
  pg_recipe="$( (cat deploy/postgres/Dockerfile deploy/postgres/entrypoint.sh; docker image inspect -f '{{ .Id }}' "$base") \
    | sha256sum | cut -c1-16)"
  pg_have="$(docker image inspect -f '{{ index .Config.Labels "agentrt.recipe" }}' "agentrt-postgres:$tag" 2>/dev/null || true)"
  if [ "$pg_have" != "$pg_recipe" ]; then
    echo "docker-image: building agentrt-postgres:$tag (Debian's PostgreSQL 15, for deploy/compose.yaml)"
    log="$(mktemp)"
    DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$base" --label "agentrt.recipe=$pg_recipe" \
      -t "agentrt-postgres:$tag" deploy/postgres >"$log" 2>&1 || { tail -n 40 "$log" >&2; rm -f "$log"; exit 1; }
    rm -f "$log"
  fi
fi
base_id="$(docker image inspect -f '{{ .Id }}' "$base" 2>/dev/null || true)"
[ -n "$base_id" ] || { echo "docker-image: base image $base is not in the engine" >&2; exit 1; }

recipe="$( {
  cat "$0" deploy/Dockerfile .dockerignore pyproject.toml README.md
  find services -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
    | sort -z | xargs -0 sha256sum
  echo "$base_id"
} | sha256sum | cut -c1-16)"
up_to_date=1
for image in "agentrt:$tag" "agentrt-tools:$tag"; do
  have="$(docker image inspect -f '{{ index .Config.Labels "agentrt.recipe" }}' "$image" 2>/dev/null || true)"
  [ "$have" = "$recipe" ] || up_to_date=0
done
if [ "$up_to_date" = 1 ]; then
  echo "docker-image: agentrt:$tag and agentrt-tools:$tag are up to date"
  exit 0
fi

# The wheelhouse: every runtime dependency of pyproject.toml, plus the build backend, plus
# what a dependency needs only on an older 3.11 than the host's (Debian's is 3.11.2: redis
# wants async-timeout below 3.11.3).
py="${AGENTRT_PYTHON:-.venv/bin/python}"
wheelhouse="${AGENTRT_WHEELHOUSE:-$HOME/.cache/agentrt-wheelhouse}/$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$wheelhouse/.complete" ]; then
  echo "docker-image: making the wheelhouse $wheelhouse"
  rm -rf "$wheelhouse" && mkdir -p "$wheelhouse"
  "$py" -m pip wheel --quiet --disable-pip-version-check -w "$wheelhouse" . \
    "setuptools==84.2.1" "async-timeout==5.0.1"
  rm -f "$wheelhouse"/agentrt-*.whl  # the code is installed from the context, in its own layer
  touch "$wheelhouse/.complete"
fi
trap 'find deploy/wheels -name "*.whl" -delete' EXIT
cp -l "$wheelhouse"/*.whl deploy/wheels/ 2>/dev/null || cp "$wheelhouse"/*.whl deploy/wheels/

started=$SECONDS
for target in mesh tools; do
  image="agentrt:$tag"
  [ "$target" = tools ] && image="agentrt-tools:$tag"
  echo "docker-image: building $image (target $target, base $base)"
  log="$(mktemp)"
  if ! docker build -f deploy/Dockerfile --target "$target" \
    --build-arg "BASE=$base" --build-arg "PIP_ARGS=--no-index --find-links /wheels" \
    --label "agentrt.recipe=$recipe" -t "$image" . >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
done
echo "docker-image: built agentrt:$tag and agentrt-tools:$tag in $((SECONDS - started)) s (recipe $recipe)"
