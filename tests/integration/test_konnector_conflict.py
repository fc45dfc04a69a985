"""Klutch's konnector serving a kind for ANOTHER consumer namespace: refused, reported, not fought.

The konnector syncs every App object of a bound kind (no selector: anynines/klutchio
bind/pkg/konnector/controllers/cluster/serviceexport/spec/spec_controller.go) into the namespace
mapped for its consumer namespace (spec/spec_reconcile.go), which is the namespace of the current
context of the kubeconfig in the Secret its APIServiceBinding's ``spec.kubeconfigSecretRef``
names (bind/pkg/konnector/konnector_reconcile.go ``reconcile``). kubectl-bind writes that Secret
into ``klutch-bind`` with ``generateName: kubeconfig-`` and the key ``kubeconfig``
(bind/pkg/kubectl/base/kubeconfig.go ``EnsureKubeconfigSecret``); the APIServiceBinding is
cluster-scoped and named after the export (bind/pkg/apis/bind/v1alpha1/apiservicebinding_types.go).

Here the repository is registered (a RepositoryBinding) for consumer namespace C; an
APIServiceBinding for its kind points first at C's binder kubeconfig (the shared mapping: no
conflict), then at D's (a conflict: the reconciler writes no Control Plane claim of that kind and
says so on the RepositoryBinding, in an Event and in reconcile.yaml), and is then deleted (the
claim made while the conflict stood is applied, once).
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_gitops.apis import API_SERVICE_BINDINGS, REPOSITORY_BINDINGS, mapped_namespace
from klutch_gitops.consumer import bind_consumer, binder_kubeconfig
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import EVENTS, NAMESPACES, SECRETS
from reconciler.manager import Reconciler
from reconciler.sync.konnector import State
from tests.env import Env
from tests.kit.claims import CLAIM_CRDS, POSTGRES, claim
from tests.kit.git import person_clone
from tests.kit.tenant import repository_binding
from tests.kit.wait import eventually

API = "postgresqlinstances.anynines.com"
KLUTCH_BIND = "klutch-bind"


def secret(name: str, namespace: str, kubeconfig: str, generate: bool = False) -> dict:
    key = "generateName" if generate else "name"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {key: name, "namespace": namespace},
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    }


def bind_app_side(app: Kube, kubeconfig: dict, cleanup: list[Callable[[], Any]]) -> str:
    """The konnector's side of a binding, as kubectl-bind writes it: the kubeconfig Secret in
    klutch-bind and the cluster-scoped APIServiceBinding named after the export. Its name."""
    made = app.create(SECRETS, secret("kubeconfig-", KLUTCH_BIND, yaml.safe_dump(kubeconfig), True))
    name = made["metadata"]["name"]
    cleanup.append(lambda: app.delete(SECRETS, KLUTCH_BIND, name))
    app.create(
        API_SERVICE_BINDINGS,
        {
            "apiVersion": API_SERVICE_BINDINGS.api_version,
            "kind": API_SERVICE_BINDINGS.kind,
            "metadata": {"name": API},
            "spec": {
                "kubeconfigSecretRef": {"namespace": KLUTCH_BIND, "name": name, "key": "kubeconfig"}
            },
        },
    )
    return name


def unbind_app_side(app: Kube) -> None:
    """``kubectl delete apiservicebinding --cascade=orphan``: the CRD it owns, and every claim
    of the kind with it, stays."""
    app.delete(API_SERVICE_BINDINGS, None, API, propagation="Orphan")
    eventually(lambda: app.get(API_SERVICE_BINDINGS, None, API) is None, "the binding gone")


def test_a_konnector_for_another_consumer_namespace_is_refused_and_reported(env: Env) -> None:
    # the cluster-scoped APIServiceBinding
    install_crds(env.clusters["app"], load_crds(cluster="app"))
    tenant = env.tenant(start=False)
    admin, app, consumer = tenant.control_plane, tenant.app, tenant.consumer
    if app.get(API_SERVICE_BINDINGS, None, API) is not None:
        pytest.fail(f"APIServiceBinding {API} is left over from another test")

    # The repository on an HTTPS Git server (RepositoryBindings take no file://), registered by a
    # RepositoryBinding in consumer namespace C.
    url, bare = env.git_server.create()
    clone = env.tmp_path / "person"
    person_clone(str(bare), clone)
    person = replace(tenant, remote=bare, clone=clone)
    binder_c = (env.tmp_path / "binder.kubeconfig").read_text()
    app_kubeconfig = Path(env.stack.clusters["app"].kubeconfig).read_text()
    admin.create(SECRETS, secret("app-cluster", consumer, app_kubeconfig))
    admin.create(SECRETS, secret("binder", consumer, binder_c))
    reconciler = Reconciler(
        env.config(repositories=(), work_dir=env.tmp_path / "bound-work")
    ).start(serve_http=False)
    env.cleanup.append(reconciler.stop)
    admin.create(
        REPOSITORY_BINDINGS,
        repository_binding(consumer, "team", url, tenant.namespace),
    )
    env.cleanup.append(lambda: admin.delete(REPOSITORY_BINDINGS, consumer, "team"))
    registration = f"{consumer}.team"

    # Consumer D: bound on the same Control Plane, its binder kubeconfig names namespace D.
    other = f"cluster-{uuid.uuid4().hex[:6]}"
    bind_consumer(admin, other, f"developer#{other}", CLAIM_CRDS)
    env.cleanup.append(lambda: admin.delete(NAMESPACES, None, other))
    app.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KLUTCH_BIND}}
    )
    env.cleanup.append(lambda: unbind_app_side(app))

    def konnector_condition(status: str) -> dict | None:
        live = admin.get(REPOSITORY_BINDINGS, consumer, "team") or {}
        found = {c["type"]: c for c in (live.get("status") or {}).get("conditions") or []}
        condition = found.get("KonnectorConflict", {})
        return condition if condition.get("status") == status else None

    # 1. The konnector's binding uses consumer namespace C: the shared mapping, no conflict.
    bind_app_side(app, yaml.safe_load(binder_c), env.cleanup)
    person.push({"claims/orders.yaml": claim("orders", tenant.namespace)}, "orders")
    eventually(lambda: admin.get(POSTGRES, tenant.mapped, "orders"), "orders on the Control Plane")

    def seen() -> State | None:  # the pass before the binding came saw none
        sync = reconciler.syncs.get(registration)
        verdict = sync.konnectors.get(API) if sync else None
        return verdict.state if verdict and verdict.state is not State.NONE else None

    assert eventually(seen, "the reconciler's look at the konnector") is State.SAME
    condition = eventually(lambda: konnector_condition("False"), "KonnectorConflict=False")
    assert condition["reason"] == "NoForeignKonnector"

    # 2. Re-bound through consumer namespace D (the ref is immutable: a new binding).
    unbind_app_side(app)
    secret_d = bind_app_side(app, binder_kubeconfig(admin, other), env.cleanup)
    condition = eventually(lambda: konnector_condition("True"), "KonnectorConflict=True")
    assert condition["reason"] == "ForeignKonnector"
    for part in (API, f"{KLUTCH_BIND}/{secret_d}", other, consumer, "--cascade=orphan"):
        assert part in condition["message"], part

    def warned() -> list[dict]:
        events = admin.list(EVENTS, consumer)[0]
        return [
            e
            for e in events
            if e["reason"] == "ForeignKonnector" and e["involvedObject"]["name"] == "team"
        ]

    event = eventually(warned, "the Warning Event on the RepositoryBinding")[0]
    assert event["type"] == "Warning"
    assert other in event["message"]

    person.push({"claims/payments.yaml": claim("payments", tenant.namespace)}, "payments")

    def refused() -> dict | None:
        try:
            text = person.remote_file("claims/.klutch/reconcile.yaml")
        except subprocess.CalledProcessError:
            return None
        [report] = yaml.safe_load(text)["registrations"].values()  # one entry per registration
        rejections = {r.get("object"): r for r in report.get("rejections") or []}
        wanted = {
            f"PostgresqlInstance.anynines.com {tenant.namespace}/{name}"
            for name in ("orders", "payments")
        }
        return rejections if wanted <= set(rejections) else None

    rejections = eventually(refused, "both documents refused in reconcile.yaml", timeout=60)
    for rejection in rejections.values():
        assert other in rejection["message"]
        assert consumer in rejection["message"]
        assert f"kubectl delete apiservicebinding {API} --cascade=orphan" in rejection["fix"]
    assert admin.get(POSTGRES, tenant.mapped, "payments") is None  # no second writer's claim
    assert app.get(POSTGRES, tenant.namespace, "payments") is None  # nor one for the konnector
    assert admin.get(POSTGRES, tenant.mapped, "orders") is not None  # nothing deleted either

    # 3. The konnector's binding is gone: the next pass applies, one Control Plane claim each.
    unbind_app_side(app)
    eventually(lambda: admin.get(POSTGRES, tenant.mapped, "payments"), "payments applied")
    eventually(lambda: konnector_condition("False"), "KonnectorConflict cleared")
    assert sorted(o["metadata"]["name"] for o in admin.list(POSTGRES, tenant.mapped)[0]) == [
        "orders",
        "payments",
    ]
    assert admin.list(POSTGRES, mapped_namespace(other, tenant.namespace))[0] == []
