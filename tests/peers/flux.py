"""The real Flux next to the reconciler, for the peers tests: the controllers, their start and the
GitRepository/Kustomization helpers live in klutch_gitops/dev/peers/flux.py, which the benchmark's
cold-sync baseline (bench/flux.py) uses too; that module's docstring cites Flux's sources."""

from __future__ import annotations

from klutch_gitops.dev.peers.flux import (
    GIT_REPOSITORIES,
    KUSTOMIZATIONS,
    MANAGER,
    VERSION,
    FluxPeer,
    condition,
    flux_crds,
    start_flux,
    stop_flux,
)

__all__ = [
    "GIT_REPOSITORIES",
    "KUSTOMIZATIONS",
    "MANAGER",
    "VERSION",
    "FluxPeer",
    "condition",
    "flux_crds",
    "start_flux",
    "stop_flux",
]
