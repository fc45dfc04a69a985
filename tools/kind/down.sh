#!/usr/bin/env bash
# Deletes the kind cluster tools/kind/up.sh made (KIND_CLUSTER, default klutch-gitops).
set -euo pipefail
kind delete cluster --name "${KIND_CLUSTER:-klutch-gitops}"
