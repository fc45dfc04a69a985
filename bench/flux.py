"""The cold sync's peer: the real Flux (source-controller and kustomize-controller v1.9.6, out of
cluster, tests/kit/flux.py) applying the same N claim files from a Git repository
into a fresh App namespace.

What kustomize-controller does with them, from github.com/fluxcd/kustomize-controller@v1.9.6 and
github.com/fluxcd/pkg (the Go module cache under /root/go/pkg/mod/github.com/fluxcd/):

- internal/controller/kustomization_controller.go ``apply``: ``kustomize build`` of the path (a
  kustomization.yaml is generated when there is none), then ``ResourceManager.ApplyAllStaged``
  (pkg/ssa manager_apply.go): CRDs, ClusterRoles and Namespaces first, then every other object
  through ``ApplyAll`` — per object a GET and a server-side-apply dry run to find drift,
  ``--concurrent-ssa`` (default 4, main.go) at a time, then the server-side apply of each new or
  changed object, one after the other (the loop over ``toApply``).
- ``--concurrent`` (default 4) Kustomizations are reconciled at once; one is used here.
- the client's rate limit: ``--kube-api-qps`` 50 and ``--kube-api-burst`` 300 (pkg/runtime
  client/client.go ``Options.BindFlags``). Run with all these defaults, as a cluster would; a
  trial of 1,000 claims (3,000 requests) took 8.9 s, so that limit did not hold it to 50/s.

The GitRepository is created first and its artifact fetched (Ready) before the clock starts: the
time runs from the Kustomization's creation to all N claims present (``limit=1`` lists, as for
ours). The intervals are an hour, so nothing waits for a poll. The controllers run only for this
measurement.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bench.claims import claim_files
from bench.measure import BenchFailure, Progress, converge, count
from bench.report import Figure
from bench.stack import Clusters
from klutch_gitops.kube.resources import NAMESPACES
from tests.gitserver import running_git_server
from tests.kit.claims import POSTGRES
from tests.kit.flux import VERSION, FluxPeer, start_flux, stop_flux
from tests.kit.git import person_clone
from tests.kit.wait import eventually

# Nothing polls during the measurement, and the apply is never cut short by the peers tests' 60 s
# timeout, however slow a busy machine makes it.
INTERVAL = "1h"


def flux_cold_sync(clusters: Clusters, work: Path, n: int, progress: Progress) -> float:
    """Seconds from creating the Kustomization to all ``n`` claims in a fresh App namespace."""
    namespace, name = f"flux-{uuid.uuid4().hex[:6]}", "bench-claims"
    (work / "flux" / "run").mkdir(parents=True)
    with running_git_server(work / "flux" / "git") as server:
        url, bare = server.create("claims")
        person_clone(str(bare), work / "flux" / "clone", claim_files(namespace, n), "claims")
        progress("starting source-controller and kustomize-controller")
        peer = start_flux(
            clusters.app.api, str(clusters.kubeconfig("app")), server, work / "flux" / "run"
        )
        try:
            clusters.app.apply(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
            peer.source(name, url, interval=INTERVAL)
            progress("source-controller fetching the repository")
            eventually(
                lambda: peer.source_ready(name)[0] == "True",
                "the GitRepository's artifact",
                timeout=120,
            )
            started = time.monotonic()
            peer.kustomize(
                name, "./claims", interval=INTERVAL, prune=True, wait=False, timeout=INTERVAL
            )
            done = converge(
                {"App": lambda: count(clusters.app, POSTGRES, namespace)},
                n,
                timeout=120 + 0.5 * n,
                progress=lambda text: progress(f"Flux applying {n} claims: {text}"),
                alive=lambda: _ready_failed(peer, name),
            )
            return done["App"] - started
        except BenchFailure as failure:
            raise BenchFailure(f"{failure}\n{peer.tails(20)}") from None
        finally:
            stop_flux(peer)


def _ready_failed(peer: FluxPeer, name: str) -> str | None:
    status, reason, message = peer.ready(name)
    if status == "False" and reason not in ("Progressing", "DependencyNotReady"):
        return f"the Kustomization failed: {reason}: {message}"
    return None


def measure_flux_peer(
    clusters: Clusters, work: Path, cold: Figure, n: int, progress: Progress
) -> list[Figure]:
    """Our cold sync (``cold``, already measured) beside Flux applying the same ``n`` files."""
    theirs = flux_cold_sync(clusters, work, n, progress)
    return [
        Figure(
            cold.name,
            "s",
            cold.value,
            f"Flux kustomize-controller {VERSION}, {n} files, App Cluster only",
            theirs,
            note="artifact fetched before; Flux's defaults: 4 dry runs at once, then the applies",
        )
    ]
