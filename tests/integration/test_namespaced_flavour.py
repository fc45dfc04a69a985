"""The namespaced-XR flavour end to end on the stack's Crossplane 2: the XRDs and Compositions of
catalog/namespaced, a PostgresqlInstance, a ServiceBinding, a Backup and a Restore in a namespace
(the catalog's examples), composed by function-klutch-local
(klutch_local/function/namespaced.py) into namespaced managed resources that the stack's
local provider makes real on its PostgreSQL.

Crossplane 2 places a namespaced XR's composed resources in its namespace, controlled by it
(crossplane/crossplane internal/controller/apiextensions/composite/composition_render.go,
RenderComposedResourceMetadata), and an XRD of apiextensions.crossplane.io/v2 with scope
Namespaced offers no claim (apis/apiextensions/v2/xrd_types.go); both are checked here.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.postgres import PostgresInfo
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import CRDS, NAMESPACES, SECRETS
from klutch_local.provider.api import BACKUPS as BACKUPS_MR
from klutch_local.provider.api import DATABASES, USERS, conditions_of, namespaced
from tests.kit.wait import eventually

pytestmark = pytest.mark.crossplane

CATALOG = Path(__file__).resolve().parents[2] / "catalog" / "namespaced"
XRDS = Resource(
    "apiextensions.crossplane.io", "v2", "compositeresourcedefinitions", namespaced=False
)
COMPOSITIONS = Resource("apiextensions.crossplane.io", "v1", "compositions", namespaced=False)
GROUP = "data.local.klutch.anynines.com"
INSTANCES = Resource(GROUP, "v1alpha1", "postgresqlinstances", "PostgresqlInstance")
BINDINGS = Resource(GROUP, "v1alpha1", "servicebindings", "ServiceBinding")
BACKUPS = Resource(GROUP, "v1alpha1", "backups", "Backup")
RESTORES = Resource(GROUP, "v1alpha1", "restores", "Restore")
DB, USER = namespaced(DATABASES), namespaced(USERS)
A9S_KEYS = ["host", "hosts", "name", "password", "port", "uri", "username"]


def documents(folder: str) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((CATALOG / folder).glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def status_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return {kind: c["status"] for kind, c in conditions_of(obj or {}).items()}


@pytest.fixture(scope="module")
def kube(clusters: dict[str, client.ApiClient]) -> Iterator[Kube]:
    """The Control Plane with the flavour's XRDs Established and its Compositions; removed at
    the end (Crossplane deletes the XRs, then the CRDs it made)."""
    admin = Kube(clusters["control-plane"])
    crd = admin.get(CRDS, None, "compositeresourcedefinitions.apiextensions.crossplane.io")
    if "v2" not in [v["name"] for v in (crd or {"spec": {"versions": []}})["spec"]["versions"]]:
        pytest.skip("the namespaced flavour needs Crossplane 2 (KLUTCH_CROSSPLANE_VERSION=2)")
    xrds, compositions = documents("xrds"), documents("compositions")
    try:
        for xrd in xrds:
            admin.apply(XRDS, xrd)
        for composition in compositions:
            admin.apply(COMPOSITIONS, composition)
        eventually(
            lambda: all(
                status_of(admin.get(XRDS, None, xrd["metadata"]["name"])).get("Established")
                == "True"
                for xrd in xrds
            ),
            "Crossplane to establish the namespaced XRDs",
            timeout=120,
        )
        yield admin
    finally:
        for composition in compositions:
            admin.delete(COMPOSITIONS, None, composition["metadata"]["name"])
        for xrd in xrds:
            admin.delete(XRDS, None, xrd["metadata"]["name"])
        eventually(
            lambda: all(admin.get(XRDS, None, x["metadata"]["name"]) is None for x in xrds),
            "Crossplane to remove the namespaced XRDs",
            timeout=180,
        )


@pytest.fixture
def team(kube: Kube) -> Iterator[str]:
    name = f"t-flavour-{uuid.uuid4().hex[:6]}"
    kube.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture(scope="module")
def postgres(stack: StackInfo) -> PostgresInfo:
    assert stack.postgres is not None, "the stack runs PostgreSQL"
    return stack.postgres


def query(postgres: PostgresInfo, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(
        host=postgres.host,
        port=postgres.port,
        user=postgres.superuser,
        password=postgres.password,
        dbname="postgres",
        autocommit=True,
    ) as connection:
        return connection.execute(statement, params).fetchall()


def ready(kube: Kube, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = kube.get(resource, namespace, name)
        found = status_of(obj)
        return obj if found.get("Synced") == found.get("Ready") == "True" else None

    return eventually(check, f"{resource.kind} {namespace}/{name} Ready", timeout=120)


def composed(kube: Kube, resource: Resource, namespace: str, xr: str) -> dict[str, Any]:
    """The one resource of ``resource`` that Crossplane composed for the XR ``xr``."""
    items, _ = kube.list(resource, namespace, label_selector=f"crossplane.io/composite={xr}")
    (item,) = items
    return item


def test_the_example_composes_namespaced_managed_resources(
    kube: Kube, postgres: PostgresInfo, team: str
) -> None:
    example = {doc["kind"]: doc for doc in documents("examples")}
    instance, binding = example["PostgresqlInstance"], example["ServiceBinding"]

    def create(obj: dict[str, Any], resource: Resource) -> None:
        kube.create(resource, {**obj, "metadata": {**obj["metadata"], "namespace": team}})

    create(instance, INSTANCES)
    create(binding, BINDINGS)

    xr = ready(kube, INSTANCES, team, instance["metadata"]["name"])
    database = composed(kube, DB, team, xr["metadata"]["name"])
    (owner,) = database["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "PostgresqlInstance",
        xr["metadata"]["uid"],
        True,
    )
    server_name = f"{team}-{instance['metadata']['name']}"
    assert database["metadata"]["annotations"]["crossplane.io/external-name"] == server_name
    assert query(
        postgres,
        "SELECT datconnlimit FROM pg_database WHERE datname = %s",
        server_name,
    ) == [(25,)]  # the example's plan is small

    ready(kube, BINDINGS, team, binding["metadata"]["name"])
    user = composed(kube, USER, team, binding["metadata"]["name"])
    assert status_of(user) == {"Synced": "True", "Ready": "True"}  # as the provider reports
    secret = kube.get(SECRETS, team, f"{binding['metadata']['name']}-creds")
    assert secret is not None, "the credentials, in the XR's namespace"
    assert sorted(secret["data"]) == A9S_KEYS
    uri = base64.b64decode(secret["data"]["uri"]).decode()
    with psycopg.connect(uri, autocommit=True) as connection:
        assert connection.execute("SELECT current_database()").fetchone() == (server_name,)
        connection.execute("CREATE TABLE orders (id int)")
        connection.execute("INSERT INTO orders VALUES (1)")

    create(example["Backup"], BACKUPS)
    ready(kube, BACKUPS, team, example["Backup"]["metadata"]["name"])
    dump = composed(kube, namespaced(BACKUPS_MR), team, example["Backup"]["metadata"]["name"])
    assert Path(dump["status"]["atProvider"]["file"]).parent == Path(postgres.backup_dir) / team
    with psycopg.connect(uri, autocommit=True) as connection:
        connection.execute("INSERT INTO orders VALUES (2)")
    create(example["Restore"], RESTORES)
    ready(kube, RESTORES, team, example["Restore"]["metadata"]["name"])
    with psycopg.connect(uri, autocommit=True) as connection:
        assert connection.execute("SELECT id FROM orders").fetchall() == [(1,)]
    for obj, resource in ((example["Restore"], RESTORES), (example["Backup"], BACKUPS)):
        kube.delete(resource, team, obj["metadata"]["name"])
    eventually(
        lambda: not Path(dump["status"]["atProvider"]["file"]).exists(),
        "the backup's dump removed",
        timeout=60,
    )

    role = f"{team}-{binding['metadata']['name']}"
    kube.delete(BINDINGS, team, binding["metadata"]["name"])
    eventually(
        lambda: not query(postgres, "SELECT 1 FROM pg_roles WHERE rolname = %s", role),
        "the binding's role dropped",
        timeout=60,
    )
    kube.delete(INSTANCES, team, instance["metadata"]["name"])
    eventually(
        lambda: not query(postgres, "SELECT 1 FROM pg_database WHERE datname = %s", server_name),
        "the instance's database dropped",
        timeout=60,
    )
    assert kube.get(SECRETS, team, f"{binding['metadata']['name']}-creds") is None
