"""The konnector conflict decision (reconciler/sync/konnector.py).

Klutch's konnector takes its consumer namespace from the current context of the kubeconfig in the
Secret its APIServiceBinding names (anynines/klutchio bind/pkg/konnector/konnector_reconcile.go
``reconcile``; a missing key, context or namespace makes it sync nothing, as
controllers/servicebinding/servicebinding_reconcile.go reports), and the key may only be
``kubeconfig`` (bind/pkg/apis/bind/v1alpha1 ``LocalSecretKeyRef``).
"""

from __future__ import annotations

import yaml

from reconciler.sync.konnector import SecretRef, State, context_namespace, decide, secret_ref

NAME = "postgresqlinstances.anynines.com"


def binding(ref: dict | None = None) -> dict:
    spec = {"kubeconfigSecretRef": ref} if ref is not None else {}
    return {"metadata": {"name": NAME}, "spec": spec}


def kubeconfig(current: str = "ctx", namespace: str | None = "cluster-d") -> bytes:
    context: dict = {"cluster": "cp", "user": "binder"}
    if namespace is not None:
        context["namespace"] = namespace
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": current,
            "clusters": [{"name": "cp", "cluster": {"server": "https://cp.example"}}],
            "users": [{"name": "binder", "user": {"token": "t0ken-never-read"}}],
            "contexts": [
                {"name": "other", "context": {"cluster": "cp", "namespace": "elsewhere"}},
                {"name": "ctx", "context": context},
            ],
        }
    ).encode()


def test_no_binding_is_no_konnector() -> None:
    assert decide(None, None, "cluster-c").state is State.NONE
    assert not decide(None, None, "cluster-c").conflict


def test_an_unreadable_kubeconfig_cannot_tell_and_is_no_conflict() -> None:
    verdict = decide(binding(), None, "cluster-c")
    assert verdict.state is State.UNKNOWN
    assert not verdict.conflict


def test_the_same_consumer_namespace_shares_the_mapping() -> None:
    ref = {"namespace": "klutch-bind", "name": "kubeconfig-c", "key": "kubeconfig"}
    assert decide(binding(ref), "cluster-c", "cluster-c").state is State.SAME


def test_another_consumer_namespace_is_a_conflict_naming_everything_and_the_fix() -> None:
    ref = {"namespace": "klutch-bind", "name": "kubeconfig-d", "key": "kubeconfig"}
    verdict = decide(binding(ref), "cluster-d", "cluster-c")
    assert verdict.conflict
    for part in (f"APIServiceBinding {NAME}", "klutch-bind/kubeconfig-d", "cluster-d", "cluster-c"):
        assert part in verdict.message
    assert "register this repository for consumer namespace cluster-d" in verdict.fix
    assert f"kubectl delete apiservicebinding {NAME} --cascade=orphan" in verdict.fix


def test_secret_ref_defaults_the_key_and_refuses_what_names_no_secret() -> None:
    assert secret_ref(binding({"namespace": "klutch-bind", "name": "k"})) == SecretRef(
        "klutch-bind", "k", "kubeconfig"
    )
    assert secret_ref(binding()) is None
    assert secret_ref(binding({"name": "k"})) is None
    assert secret_ref(binding({"namespace": "klutch-bind", "name": ""})) is None
    assert secret_ref({"metadata": {"name": NAME}, "spec": {"kubeconfigSecretRef": "x"}}) is None


def test_context_namespace_is_the_current_contexts() -> None:
    assert context_namespace(kubeconfig()) == "cluster-d"
    assert context_namespace(kubeconfig(current="other")) == "elsewhere"


def test_context_namespace_is_none_where_the_konnector_would_sync_nothing() -> None:
    assert context_namespace(kubeconfig(namespace=None)) is None
    assert context_namespace(kubeconfig(current="missing")) is None
    assert context_namespace(b"") is None
    assert context_namespace(b"\xff\xfe not utf-8") is None
    assert context_namespace(b"[a, list]") is None
    assert context_namespace(b"contexts: {not: a list}") is None
    assert context_namespace(b"a: [unclosed") is None
    assert context_namespace(b"x" * (200 * 1024)) is None  # bounded: no huge documents
