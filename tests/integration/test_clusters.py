"""The two clusters are real Kubernetes: CRDs, watches, RBAC, controllers, isolation."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from tests.conftest import TwinNamespace

CLUSTERS = ("app", "control-plane")


def eventually(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def status_of(call: Callable[[], object]) -> int:
    try:
        call()
    except ApiException as error:
        return error.status
    return 200


def api_client(
    url: str, ca: str, *, token: str | None = None, cert: tuple[str, str] | None = None
) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    configuration.ssl_ca_cert = ca
    if token:
        configuration.api_key = {"authorization": f"Bearer {token}"}
    if cert:
        configuration.cert_file, configuration.key_file = cert
    return client.ApiClient(configuration)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cluster_runs_the_built_kubernetes(
    clusters: dict[str, client.ApiClient], cluster: str
) -> None:
    version = client.VersionApi(clusters[cluster]).get_code()
    assert version.git_version == "v1.34.3"
    names = {ns.metadata.name for ns in client.CoreV1Api(clusters[cluster]).list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_clusters_are_separate(namespace: TwinNamespace) -> None:
    """Separate etcd prefixes: an object written to one cluster is absent from the other."""
    namespace.core("app").create_namespaced_config_map(
        namespace.name,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="only-in-app"), data={"k": "v"}),
    )
    assert namespace.core("app").read_namespaced_config_map("only-in-app", namespace.name).data
    assert (
        status_of(
            lambda: namespace.core("control-plane").read_namespaced_config_map(
                "only-in-app", namespace.name
            )
        )
        == 404
    )


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_crd_custom_resources_and_watch(namespace: TwinNamespace, cluster: str) -> None:
    api = namespace.clusters[cluster]
    group = f"g{uuid.uuid4().hex[:8]}.test.klutch.example"
    crd = client.V1CustomResourceDefinition(
        metadata=client.V1ObjectMeta(name=f"widgets.{group}"),
        spec=client.V1CustomResourceDefinitionSpec(
            group=group,
            scope="Namespaced",
            names=client.V1CustomResourceDefinitionNames(
                plural="widgets", singular="widget", kind="Widget"
            ),
            versions=[
                client.V1CustomResourceDefinitionVersion(
                    name="v1",
                    served=True,
                    storage=True,
                    subresources=client.V1CustomResourceSubresources(status={}),
                    schema=client.V1CustomResourceValidation(
                        open_apiv3_schema=client.V1JSONSchemaProps(
                            type="object",
                            properties={
                                "spec": client.V1JSONSchemaProps(
                                    type="object",
                                    properties={
                                        "size": client.V1JSONSchemaProps(type="integer", minimum=1)
                                    },
                                ),
                                "status": client.V1JSONSchemaProps(
                                    type="object", x_kubernetes_preserve_unknown_fields=True
                                ),
                            },
                        )
                    ),
                )
            ],
        ),
    )
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(crd)
    try:
        eventually(
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(
                    f"widgets.{group}"
                ).status.conditions
                or []
            ),
            "the CRD to be established",
        )
        custom = client.CustomObjectsApi(api)
        args = (group, "v1", namespace.name, "widgets")
        eventually(
            lambda: status_of(lambda: custom.list_namespaced_custom_object(*args)) == 200,
            "the new resource to be served",
        )

        events: list[tuple[str, int]] = []
        watcher = watch.Watch()
        watching = threading.Event()

        def follow() -> None:
            stream = watcher.stream(
                custom.list_namespaced_custom_object, *args, timeout_seconds=30, _request_timeout=40
            )
            watching.set()
            for event in stream:
                events.append((event["type"], event["object"]["spec"]["size"]))
                if event["type"] == "DELETED":
                    watcher.stop()

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        watching.wait(10)
        time.sleep(0.5)  # the watch request is sent lazily, on the first iteration
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 1},
        }
        custom.create_namespaced_custom_object(*args, body)
        custom.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 2}})
        invalid = {**body, "metadata": {"name": "w2"}, "spec": {"size": 0}}
        assert status_of(lambda: custom.create_namespaced_custom_object(*args, invalid)) == 422
        custom.delete_namespaced_custom_object(*args, "w1")
        thread.join(35)
        assert events == [("ADDED", 1), ("MODIFIED", 2), ("DELETED", 2)]
    finally:
        extensions.delete_custom_resource_definition(f"widgets.{group}")


def test_rbac_denies_a_service_account_without_rights(
    namespace: TwinNamespace, stack: StackInfo
) -> None:
    core = namespace.core("app")
    core.create_namespaced_service_account(
        namespace.name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody"))
    )
    token = core.create_namespaced_service_account_token(
        "nobody",
        namespace.name,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    ).status.token
    as_nobody = client.CoreV1Api(api_client(stack.clusters["app"].url, stack.dex.ca, token=token))
    assert status_of(lambda: as_nobody.list_namespaced_config_map(namespace.name)) == 403

    rbac = client.RbacAuthorizationV1Api(namespace.clusters["app"])
    rbac.create_namespaced_role(
        namespace.name,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="read-configmaps"),
            rules=[
                client.V1PolicyRule(
                    api_groups=[""], resources=["configmaps"], verbs=["get", "list"]
                )
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace.name,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="nobody-reads"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="read-configmaps"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="nobody", namespace=namespace.name)
            ],
        ),
    )
    eventually(
        lambda: status_of(lambda: as_nobody.list_namespaced_config_map(namespace.name)) == 200,
        "the RoleBinding to grant access",
    )
    assert status_of(lambda: as_nobody.list_namespaced_secret(namespace.name)) == 403

    # The token was signed with the app cluster's key: the control plane does not know it.
    other = client.CoreV1Api(
        api_client(stack.clusters["control-plane"].url, stack.dex.ca, token=token)
    )
    assert status_of(lambda: other.list_namespaced_config_map(namespace.name)) == 401


def test_rbac_denies_a_certificate_user_without_rights(
    local_stack: LocalStack, stack: StackInfo, tmp_path
) -> None:
    pki = Pki(local_stack.paths.pki)
    mallory = pki.client_cert("mallory", groups=("outsiders",))
    (tmp_path / "m.crt").write_bytes(mallory.cert_pem)
    (tmp_path / "m.key").write_bytes(mallory.key_pem)
    for cluster in CLUSTERS:
        api = client.CoreV1Api(
            api_client(
                stack.clusters[cluster].url,
                stack.dex.ca,
                cert=(str(tmp_path / "m.crt"), str(tmp_path / "m.key")),
            )
        )
        assert status_of(api.list_namespace) == 403
        assert status_of(lambda api=api: api.list_namespaced_secret("kube-system")) == 403


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_controller_manager_runs_its_controllers(
    clusters: dict[str, client.ApiClient], cluster: str
) -> None:
    core = client.CoreV1Api(clusters[cluster])
    name = f"t-ctrl-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    # serviceaccount and root-ca publisher controllers fill a new namespace
    eventually(
        lambda: status_of(lambda: core.read_namespaced_service_account("default", name)) == 200,
        "the default ServiceAccount",
    )
    eventually(
        lambda: status_of(lambda: core.read_namespaced_config_map("kube-root-ca.crt", name)) == 200,
        "the kube-root-ca.crt ConfigMap",
    )

    # garbage collector: a dependent goes when its owner goes
    owner = core.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    core.create_namespaced_config_map(
        name,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="dependent",
                owner_references=[
                    client.V1OwnerReference(
                        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
                    )
                ],
            )
        ),
    )
    core.delete_namespaced_config_map("owner", name)
    eventually(
        lambda: status_of(lambda: core.read_namespaced_config_map("dependent", name)) == 404,
        "the garbage collector to delete the dependent",
    )

    # namespace controller: a deleted namespace empties and disappears
    core.delete_namespace(name)
    eventually(
        lambda: status_of(lambda: core.read_namespace(name)) == 404,
        "the namespace to finish deleting",
    )
