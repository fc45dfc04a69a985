"""A pushed claim becomes a real, usable PostgreSQL database: Git → reconciler → Control Plane
→ real Crossplane (the catalog's XRDs, the local-* Compositions) → the local provider → the
stack's PostgreSQL server, and back: Ready in the App claim and in a status commit, credentials in
the App Cluster that connect; Backup and Restore bring rows back; deleting drops the database.

It runs on both Crossplane lines (catalogstack ``line_stack``): 2.x, the session stack's, and 1.20,
the line Klutch supports today, with the same Compositions and function. On both, the claim CRD
Crossplane generates declares the top-level ``status.observedGeneration`` the catalog's XRDs
declare (crossplane v1.20.13 internal/xcrd/crd.go ``genCrdVersion`` merges an XRD's status
properties into the claim's), and a Ready App claim says it observed its own generation, which
Flux (fluxcd/pkg runtime/cel/status_evaluator.go) and our Argo CD Lua read first.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import CRDS, SECRETS
from reconciler.manager import Reconciler
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

from .catalogstack import (
    LINE_IDS,
    LINES,
    clusters_for_line,
    conditions,
    local_claim_crds,
    local_instance,
    stack_for_line,
)

pytestmark = pytest.mark.crossplane

GROUP = "anynines.com"
KINDS = {
    "PostgresqlInstance": "postgresqlinstances",
    "ServiceBinding": "servicebindings",
    "Backup": "backups",
    "Restore": "restores",
}
A9S_KEYS = {"host", "hosts", "name", "password", "port", "uri", "username"}
PROVISIONING = 180.0  # Crossplane and the provider each poll with back-off on a loaded machine


def claims(kind: str) -> Resource:
    return Resource(GROUP, "v1", KINDS[kind], kind)


@pytest.fixture(scope="module", params=LINES, ids=LINE_IDS)
def line_stack(request: pytest.FixtureRequest) -> StackInfo:
    return stack_for_line(request)


@pytest.fixture(scope="module")
def line_clusters(
    line_stack: StackInfo, request: pytest.FixtureRequest
) -> dict[str, client.ApiClient]:
    return clusters_for_line(line_stack, request)


@pytest.fixture(scope="module")
def catalog(line_clusters: dict[str, client.ApiClient]) -> Iterator[list[dict]]:
    with local_claim_crds(line_clusters) as crds:
        yield crds


@pytest.fixture
def tenant(
    line_stack: StackInfo,
    line_clusters: dict[str, client.ApiClient],
    catalog: list[dict],
    tmp_path: Path,
) -> Iterator[Tenant]:
    tenant = make_tenant(line_stack, line_clusters, tmp_path, claim_crds=catalog)
    yield tenant
    tenant.reconciler.stop()


def manifest(kind: str, name: str, namespace: str, spec: str) -> str:
    return f"""apiVersion: {GROUP}/v1
kind: {kind}
metadata:
  name: {name}
  namespace: {namespace}
spec:
{spec}"""


def ready(kube: Kube, kind: str, namespace: str, name: str) -> bool:
    return conditions(kube.get(claims(kind), namespace, name)).get("Ready") == "True"


def superuser(stack: StackInfo) -> psycopg.Connection:
    assert stack.postgres is not None
    return psycopg.connect(
        host=stack.postgres.host,
        port=stack.postgres.port,
        user=stack.postgres.superuser,
        password=stack.postgres.password,
        dbname="postgres",
        autocommit=True,
    )


def databases(stack: StackInfo) -> set[str]:
    with superuser(stack) as connection:
        return {row[0] for row in connection.execute("SELECT datname FROM pg_database")}


def rows(uri: str) -> list[tuple]:
    with psycopg.connect(uri) as connection:
        return connection.execute("SELECT id, item FROM orders ORDER BY id").fetchall()


def declares_observed_generation(crd: dict) -> bool:
    return all(
        "observedGeneration"
        in version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        for version in crd["spec"]["versions"]
    )


def observed_current(kube: Kube, kind: str, namespace: str, name: str) -> bool:
    """The App claim's top-level ``status.observedGeneration`` is its generation."""
    live = kube.get(claims(kind), namespace, name) or {}
    observed = (live.get("status") or {}).get("observedGeneration")
    return observed is not None and observed == live["metadata"]["generation"]


def test_a_pushed_claim_becomes_a_database_with_backup_restore_and_deletion(
    tenant: Tenant, line_stack: StackInfo, catalog: list[dict]
) -> None:
    stack, ns = line_stack, tenant.namespace
    undeclared = [
        crd["metadata"]["name"] for crd in catalog if not declares_observed_generation(crd)
    ]
    assert not undeclared, f"claim CRDs without status.observedGeneration: {undeclared}"
    instance = manifest(
        "PostgresqlInstance",
        "orders",
        ns,
        "  service: a9s-postgresql14\n  plan: postgresql-single-small\n"
        "  compositionRef:\n    name: local-postgresql\n"
        "  parameters:\n    statementTimeout: 60000\n",
    )
    binding = manifest(
        "ServiceBinding",
        "orders-app",
        ns,
        "  instanceRef: orders\n  serviceInstanceType: postgresql\n"
        "  compositionRef:\n    name: local-servicebinding\n",
    )
    tenant.push(
        {"claims/orders.yaml": instance, "claims/orders-app.yaml": binding}, "orders database"
    )

    eventually(
        lambda: (
            ready(tenant.app, "PostgresqlInstance", ns, "orders")
            and ready(tenant.app, "ServiceBinding", ns, "orders-app")
        ),
        "Ready in the App claims",
        timeout=PROVISIONING,
    )
    eventually(
        lambda: (
            observed_current(tenant.app, "PostgresqlInstance", ns, "orders")
            and observed_current(tenant.app, "ServiceBinding", ns, "orders-app")
        ),
        "status.observedGeneration == metadata.generation in the App claims",
        timeout=30,
    )
    database = f"{tenant.mapped}-orders"
    assert database in databases(stack)
    with superuser(stack) as connection:
        (limit,) = connection.execute(
            "SELECT datconnlimit FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
    assert limit == 25  # the plan's size: small

    secret = eventually(
        lambda: tenant.app.get(SECRETS, ns, "orders-app-creds"), "the credentials in the App"
    )
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(values) >= A9S_KEYS
    assert values["name"] == database
    with psycopg.connect(values["uri"]) as connection:
        (timeout,) = connection.execute("SHOW statement_timeout").fetchone()
        assert timeout == "1min"  # parameters.statementTimeout reached the database
        connection.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
        connection.execute("INSERT INTO orders VALUES (1, 'tea'), (2, 'cake')")

    def status_committed() -> bool:
        tenant.pull()
        text = (tenant.clone / "claims" / "orders.yaml").read_text()
        return "status:" in text and "type: Ready" in text

    eventually(status_committed, "Ready in a status commit", timeout=60)

    tenant.push(
        {
            "claims/orders-backup.yaml": manifest(
                "Backup",
                "nightly",
                ns,
                "  instanceRef: orders\n  serviceInstanceType: postgresql\n"
                "  compositionRef:\n    name: local-backup\n",
            )
        },
        "back up orders",
    )
    eventually(
        lambda: ready(tenant.app, "Backup", ns, "nightly"),
        "the Backup to be Ready",
        timeout=PROVISIONING,
    )
    with psycopg.connect(values["uri"], autocommit=True) as connection:
        connection.execute("DELETE FROM orders WHERE id = 1")
        connection.execute("INSERT INTO orders VALUES (3, 'spilled milk')")
    assert rows(values["uri"]) == [(2, "cake"), (3, "spilled milk")]

    tenant.push(
        {
            "claims/orders-restore.yaml": manifest(
                "Restore",
                "undo",
                ns,
                "  backupRef: nightly\n  instanceRef: orders\n  serviceInstanceType: postgresql\n"
                "  compositionRef:\n    name: local-restore\n",
            )
        },
        "restore orders",
    )
    eventually(
        lambda: ready(tenant.app, "Restore", ns, "undo"),
        "the Restore to be Ready",
        timeout=PROVISIONING,
    )
    assert rows(values["uri"]) == [(1, "tea"), (2, "cake")]

    tenant.push(
        {
            "claims/orders.yaml": None,
            "claims/orders-app.yaml": None,
            "claims/orders-backup.yaml": None,
            "claims/orders-restore.yaml": None,
        },
        "drop orders",
    )
    eventually(
        lambda: database not in databases(stack),
        "the database to be dropped",
        timeout=PROVISIONING,
    )
    eventually(
        lambda: all(
            not tenant.app.list(claims(kind), ns)[0]
            and not tenant.control_plane.list(claims(kind), tenant.mapped)[0]
            for kind in KINDS
        ),
        "the claims to be gone from both clusters",
        timeout=PROVISIONING,
    )


FLUX_LABELS = {  # what kustomize-controller sets on what it applies (test_external_sync's FLUX)
    "kustomize.toolkit.fluxcd.io/name": "team-data",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}


def served(kube: Kube, kind: str) -> bool:
    """The App Cluster serves the claim kind (the reconciler installs the export's CRD)."""
    crd = kube.get(CRDS, None, f"{KINDS[kind]}.{GROUP}") or {}
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def flux_apply(kube: Kube, text: str) -> dict:
    """Apply a claim as Flux's kustomize-controller does: server-side, its field manager."""
    doc = yaml.safe_load(text)
    doc["metadata"]["labels"] = dict(FLUX_LABELS)
    return kube.apply(claims("PostgresqlInstance"), doc, field_manager="kustomize-controller")


def test_a_spec_change_is_in_progress_until_the_control_plane_copy_has_it(
    line_stack: StackInfo,
    line_clusters: dict[str, client.ApiClient],
    catalog: list[dict],
    tmp_path: Path,
) -> None:
    """``appSync: external``, Flux applying: a change the reconciler has not taken to the Control
    Plane yet (it is held back, as tests/peers/test_flux_progress.py does) shows as in progress,
    ``status.observedGeneration`` below ``metadata.generation``, which Flux reads before any
    health expression (fluxcd/pkg runtime/cel/status_evaluator.go); on 1.20 nothing else in
    the status could say so. Once the reconciler runs again, the generation is observed only
    with the new spec on the Control Plane copy."""
    tenant = make_tenant(
        line_stack, line_clusters, tmp_path, mode="files", claim_crds=catalog, app_sync="external"
    )
    ns, kind = tenant.namespace, "PostgresqlInstance"
    caught_up: Reconciler | None = None
    try:
        tenant.push({"claims/held.yaml": local_instance("held", ns, "postgresql-single-nano")})
        eventually(lambda: served(tenant.app, kind), "the claim kind in the App Cluster")
        flux_apply(tenant.app, local_instance("held", ns, "postgresql-single-nano"))
        eventually(
            lambda: (
                ready(tenant.app, kind, ns, "held")
                and observed_current(tenant.app, kind, ns, "held")
            ),
            "Ready and observed in the App claim",
            timeout=PROVISIONING,
        )
        tenant.reconciler.stop()  # the reconciler falls behind (down, busy, far away)
        bigger = local_instance("held", ns, "postgresql-single-small")
        tenant.push({"claims/held.yaml": bigger}, "a bigger plan")
        live = flux_apply(tenant.app, bigger)
        generation = live["metadata"]["generation"]
        assert live["status"]["observedGeneration"] == generation - 1, live["status"]
        assert not observed_current(tenant.app, kind, ns, "held")

        caught_up = Reconciler(tenant.config)
        caught_up.start()

        def observed_copy() -> dict | None:
            """The CP copy as it is once the App claim says it observed its generation (read
            after: a spec taken in stays taken in)."""
            if not observed_current(tenant.app, kind, ns, "held"):
                return None
            return tenant.control_plane.get(claims(kind), tenant.mapped, "held")

        copy = eventually(observed_copy, "the new generation observed", timeout=PROVISIONING)
        assert copy["spec"]["plan"] == "postgresql-single-small"
        print(f"observed generation {generation} after the reconciler caught up")
        tenant.app.delete(claims(kind), ns, "held")  # Flux prunes; the reconciler holds it
        eventually(
            lambda: (
                tenant.app.get(claims(kind), ns, "held") is None
                and tenant.control_plane.get(claims(kind), tenant.mapped, "held") is None
            ),
            "the claim gone from both clusters",
            timeout=PROVISIONING,
        )
    finally:
        if caught_up is not None:
            caught_up.stop()
        tenant.reconciler.stop()
