#!/usr/bin/env bash
# kind as the Control Plane Cluster, with klutch-gitops installed from its chart and image.
#   tools/kind/up.sh                  docker build the image, then create, load, install, wait
#   KLUTCH_IMAGE_ARCHIVE=image.tar tools/kind/up.sh
#                                     load an archive of `python -m tools.release.image build --archive`
#                                     (the daemonless build) instead of building with Docker
# Needs docker (a running daemon), kind, kubectl and helm on PATH (`make bins` builds kubectl and
# helm into ~/.cache/klutch-gitops/bin/). tools/kind/down.sh deletes the cluster.
# Settings (environment): KIND_CLUSTER (klutch-gitops), KLUTCH_NAMESPACE (klutch-system),
# KLUTCH_RELEASE (klutch-gitops), KLUTCH_VALUES (extra values file for helm), KLUTCH_WAIT (300s).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=${KIND_CLUSTER:-klutch-gitops}
namespace=${KLUTCH_NAMESPACE:-klutch-system}
release=${KLUTCH_RELEASE:-klutch-gitops}
wait=${KLUTCH_WAIT:-300s}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n 1)
registry=ghcr.io
repository=anynines/klutch-gitops
image="$registry/$repository:$version" # what the chart renders by default for this version
context="kind-$cluster"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not on PATH" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "error: docker info failed: start Docker" >&2; exit 1; }

step() { printf '\n== %s\n' "$*"; }

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  step "kind cluster $cluster exists"
else
  step "creating kind cluster $cluster"
  kind create cluster --name "$cluster" --wait 120s
fi

if [ -n "${KLUTCH_IMAGE_ARCHIVE:-}" ]; then
  step "loading $KLUTCH_IMAGE_ARCHIVE (its image must be $image)"
  kind load image-archive "$KLUTCH_IMAGE_ARCHIVE" --name "$cluster"
else
  step "docker build -t $image"
  docker build -t "$image" "$repo"
  kind load docker-image "$image" --name "$cluster"
fi

step "helm upgrade --install $release (namespace $namespace)"
values=(--values "$repo/charts/klutch-gitops/ci/default-values.yaml")
[ -n "${KLUTCH_VALUES:-}" ] && values+=(--values "$KLUTCH_VALUES")
helm upgrade --install "$release" "$repo/charts/klutch-gitops" \
  --kube-context "$context" --namespace "$namespace" --create-namespace \
  "${values[@]}" \
  --set image.registry="$registry" --set image.repository="$repository" \
  --set image.tag="$version" --set image.pullPolicy=Never

step "waiting for the Deployments of $release to become Available"
selector="app.kubernetes.io/instance=$release"
if ! kubectl --context "$context" -n "$namespace" wait deployment -l "$selector" \
  --for=condition=Available --timeout="$wait"; then
  kubectl --context "$context" -n "$namespace" get pods -l "$selector" -o wide >&2 || true
  kubectl --context "$context" -n "$namespace" logs -l "$selector" --all-containers \
    --tail=40 --prefix >&2 || true
  exit 1
fi
kubectl --context "$context" -n "$namespace" get deployments -l "$selector"
echo
echo "ready: kubectl --context $context -n $namespace get pods"
