"""The catalog on the stack's Control Plane, for the tests that need Crossplane to offer it, and
the other Crossplane line's stack.

Crossplane takes over a claim CRD of the same name that it did not create (the stand-ins of
``catalog/dev/claim-crds.yaml`` that other tests install) and deletes it with its XRD; the
stand-ins found at the start are installed again at the end.

The session stack runs the selected line (Crossplane 2 unless KLUTCH_CROSSPLANE_VERSION says
1.20); the Crossplane, catalog and provisioning tests also run a subset on the other line (1.20,
the line Klutch supports today, by default) on a second stack that the first test asking for it
starts and the session's end stops. A module's fixture parametrized by ``LINES`` (ids
``LINE_IDS``) gets that line's stack from ``stack_for_line`` and its clusters from
``clusters_for_line``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from klutch_gitops.catalog import load_compositions, load_xrds
from klutch_gitops.dev.localstack import crossplane
from klutch_gitops.dev.localstack.crossplane import FUNCTION_NAME
from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import CRDS
from tests.kit.wait import eventually
from tests.stack import admin_clients

XRDS = Resource(
    "apiextensions.crossplane.io", "v1", "compositeresourcedefinitions", namespaced=False
)
COMPOSITIONS = Resource("apiextensions.crossplane.io", "v1", "compositions", namespaced=False)
GROUP = "anynines.com"
LOCAL_KINDS = ("postgresqlinstances", "servicebindings", "backups", "restores")
TRANSITION = "Transition from bigger to smaller plan size is not supported."
SESSION_LINE = crossplane.selected_version()
OTHER_LINE = next(line for line in crossplane.VERSIONS if line != SESSION_LINE)
LINES = (SESSION_LINE, OTHER_LINE)
LINE_IDS = [f"crossplane-{line}" for line in LINES]
_OTHER_STACK = pytest.StashKey[LocalStack]()


def conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions", [])}


def clusterrole_step(**extra: Any) -> dict[str, Any]:
    """A pipeline step that composes a ClusterRole (a kind every Control Plane serves, which
    has no conditions) annotated with the composite's ``spec.size``, through the stack's
    function-klutch-local (its ``template`` composer); ``extra`` goes into the step's input."""
    return {
        "step": "compose",
        "functionRef": {"name": FUNCTION_NAME},
        "input": {
            "apiVersion": "local.klutch.anynines.com/v1alpha1",
            "kind": "Compose",
            "compose": "template",
            "resource": {
                "name": "role",
                "base": {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"annotations": {"size": "unset"}},
                },
            },
            "fields": {"metadata.annotations.size": "spec.size"},
            "readinessCheck": "None",
            **extra,
        },
    }


@contextmanager
def catalog_offered(
    clusters: dict[str, client.ApiClient], backends: Iterable[str] = ()
) -> Iterator[Kube]:
    """The catalog's XRDs (and the Compositions of ``backends``) on the Control Plane, once
    Crossplane reports every XRD Established and Offered; removed afterwards."""
    admin = Kube(clusters["control-plane"])
    xrds, compositions = load_xrds(), load_compositions(tuple(backends))
    stand_ins = [
        crd
        for crd in load_dev_claim_crds()
        if (live := admin.get(CRDS, None, crd["metadata"]["name"]))
        and not live["metadata"].get("ownerReferences")
    ]
    try:
        for xrd in xrds:
            admin.apply(XRDS, xrd)
        for composition in compositions:
            admin.apply(COMPOSITIONS, composition)
        eventually(
            lambda: all(
                conditions(admin.get(XRDS, None, xrd["metadata"]["name"]))
                == {"Established": "True", "Offered": "True"}
                for xrd in xrds
            ),
            "Crossplane to establish and offer every XRD",
            timeout=120,
        )
        yield admin
    finally:
        for composition in compositions:
            admin.delete(COMPOSITIONS, None, composition["metadata"]["name"])
        for xrd in xrds:
            admin.delete(XRDS, None, xrd["metadata"]["name"])
        eventually(  # Crossplane deletes the claims, then the CRDs it defined, then the XRDs go
            lambda: all(admin.get(XRDS, None, xrd["metadata"]["name"]) is None for xrd in xrds),
            "Crossplane to remove the CRDs of the deleted XRDs",
            timeout=180,
        )
        if stand_ins:
            install_crds(clusters["control-plane"], stand_ins)


@contextmanager
def local_claim_crds(clusters: dict[str, client.ApiClient]) -> Iterator[list[dict[str, Any]]]:
    """The catalog offered with the local backend; the claim CRDs Crossplane made for the kinds
    the local backend serves (what a tenant binds)."""
    with catalog_offered(clusters, backends=("local",)) as admin:
        yield [admin.get(CRDS, None, f"{plural}.{GROUP}") for plural in LOCAL_KINDS]


def local_instance(name: str, namespace: str, plan: str, metadata: str = "") -> str:
    """A PostgresqlInstance on the local backend; ``metadata`` adds indented metadata lines."""
    return f"""apiVersion: {GROUP}/v1
kind: PostgresqlInstance
metadata:
  name: {name}
  namespace: {namespace}
{metadata}spec:
  service: a9s-postgresql14
  plan: {plan}
  compositionRef:
    name: local-postgresql
"""


def other_line_stack(request: pytest.FixtureRequest) -> StackInfo:
    """The other line's stack, started once per run and stopped at its end; its start time is
    printed (``-s`` shows it)."""
    config = request.config
    if _OTHER_STACK not in config.stash:
        directory = request.getfixturevalue("tmp_path_factory").mktemp(
            f"stack-crossplane-{OTHER_LINE}-"
        )
        stack = LocalStack(directory)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(crossplane.VERSION_VARIABLE, OTHER_LINE)
            started = time.monotonic()
            try:
                stack.start()
            except KlutchError as error:
                pytest.fail(f"the Crossplane {OTHER_LINE} stack did not start: {error}")
        config.add_cleanup(stack.stop)
        config.stash[_OTHER_STACK] = stack
        print(f"\nCrossplane {OTHER_LINE} stack started in {time.monotonic() - started:.1f}s")
    info = config.stash[_OTHER_STACK].info
    assert info is not None
    return info


def stack_for_line(request: pytest.FixtureRequest) -> StackInfo:
    """For a fixture parametrized by ``LINES``: the session stack for its own line, the other
    line's stack for the other."""
    if request.param == SESSION_LINE:
        return request.getfixturevalue("stack")
    return other_line_stack(request)


def clusters_for_line(
    stack: StackInfo, request: pytest.FixtureRequest
) -> dict[str, client.ApiClient]:
    """Admin clients of ``stack``'s clusters (the session's own for the session stack)."""
    if stack.crossplane == SESSION_LINE:
        return request.getfixturevalue("clusters")
    return admin_clients(stack)
