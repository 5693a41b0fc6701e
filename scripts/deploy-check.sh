#!/usr/bin/env bash
# Render every kustomize overlay under deploy/k8s/overlays and validate what it renders against
# the Kubernetes schemas kubernetes-validate bundles (strict: an unknown field fails), for the
# oldest Kubernetes the manifests support and the newest bundled. No cluster, no network.
#
#   scripts/deploy-check.sh        (make deploy-check; needs kubectl and .venv from make install)
set -euo pipefail

cd "$(dirname "$0")/.."
versions="${AGENTRT_K8S_VERSIONS:-1.30.0 1.37.0}"
validate=".venv/bin/kubernetes-validate"
command -v kubectl >/dev/null || { echo "deploy-check: kubectl is missing (kubectl kustomize renders the overlays)" >&2; exit 1; }
[ -x "$validate" ] || { echo "deploy-check: $validate is missing (make install)" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
status=0
for overlay in deploy/k8s/overlays/*/; do
  name="$(basename "$overlay")"
  if ! kubectl kustomize "$overlay" > "$out/$name.yaml"; then
    echo "deploy-check: $overlay does not render" >&2
    status=1
    continue
  fi
  count="$(grep -c '^kind:' "$out/$name.yaml")"
  for version in $versions; do
    if "$validate" --strict --quiet -k "$version" "$out/$name.yaml"; then
      echo "deploy-check: $name: $count objects valid for Kubernetes $version"
    else
      status=1
    fi
  done
done
exit $status
