"""The namespaced CRDs (Crossplane 2's ``.m.`` group), derived from the cluster-scoped ones.

The cluster-scoped CRDs in ``catalog/provider/`` are written by hand; their namespaced twins in
``catalog/provider/namespaced/`` are generated from them (``python -m
klutch_local.provider.crds``) so the two flavours cannot drift apart: the same
``forProvider`` and ``atProvider``, and the spec fields crossplane/crossplane apis/v2
core/v2/resource_namespace.go gives a namespaced managed resource (``providerConfigRef {kind,
name}`` defaulting to the ClusterProviderConfig ``default``, ``writeConnectionSecretToRef {name}``,
``managementPolicies`` defaulting to ``["*"]``, no ``deletionPolicy``). A unit test checks the
committed files are what this module makes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from klutch_local.provider.api import (
    CLUSTER_PROVIDER_CONFIG,
    CRD_DIR,
    M_GROUP,
    NAMESPACED_CRD_DIR,
    load_crds,
)

MANAGEMENT_ACTIONS = ["Observe", "Create", "Update", "Delete", "LateInitialize", "*"]


def spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def _renamed(crd: dict[str, Any], kind: str, plural: str, scope: str) -> dict[str, Any]:
    out = copy.deepcopy(crd)
    out["metadata"] = {"name": f"{plural}.{M_GROUP}"}
    names = out["spec"]["names"]
    names.update(kind=kind, listKind=f"{kind}List", plural=plural, singular=kind.lower())
    out["spec"].update(group=M_GROUP, scope=scope)
    return out


def namespaced_managed(crd: dict[str, Any]) -> dict[str, Any]:
    """A cluster-scoped managed-resource CRD as Crossplane 2's namespaced kind."""
    names = crd["spec"]["names"]
    out = _renamed(crd, names["kind"], names["plural"], "Namespaced")
    spec = spec_schema(out)
    props = spec["properties"]
    del props["deletionPolicy"]
    props["managementPolicies"] = {
        "type": "array",
        "description": "What the provider may do to the external resource: '*' (everything), or "
        "a list of Observe, Create, Update, Delete (without Delete, deleting this object keeps "
        "the external resource).",
        "default": ["*"],
        "items": {"type": "string", "enum": MANAGEMENT_ACTIONS},
    }
    props["providerConfigRef"] = {
        "type": "object",
        "description": "The ClusterProviderConfig, or a ProviderConfig in this namespace, naming "
        "the server.",
        "default": {"kind": CLUSTER_PROVIDER_CONFIG, "name": "default"},
        "required": ["kind", "name"],
        "properties": {
            "kind": {
                "type": "string",
                "description": "ClusterProviderConfig or ProviderConfig.",
                "enum": [CLUSTER_PROVIDER_CONFIG, "ProviderConfig"],
            },
            "name": {"type": "string", "description": "Name of the provider config."},
        },
    }
    secret = props.get("writeConnectionSecretToRef")
    if secret is not None:
        secret["description"] += " It is written in this namespace."
        secret["required"] = ["name"]
        secret["properties"] = {"name": secret["properties"]["name"]}
    for field in (props.get("forProvider") or {}).get("properties", {}).values():
        if field.get("type") == "object" and field.get("description", "").endswith(" is used."):
            field["description"] = field["description"].replace(" by name;", " in this namespace;")
    return out


def provider_configs(crd: dict[str, Any]) -> list[dict[str, Any]]:
    """The cluster ProviderConfig as a ClusterProviderConfig, and a namespaced ProviderConfig
    whose Secret is in its own namespace and which has no backup store of its own."""
    cluster = _renamed(crd, CLUSTER_PROVIDER_CONFIG, "clusterproviderconfigs", "Cluster")
    local = _renamed(crd, "ProviderConfig", "providerconfigs", "Namespaced")
    props = spec_schema(local)["properties"]
    del props["backupStore"]
    ref = props["credentials"]["properties"]["connectionSecretRef"]
    ref["description"] = ref["description"].replace("A Secret", "A Secret in this namespace")
    ref["required"] = ["name"]
    ref["properties"] = {"name": ref["properties"]["name"]}
    local["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = (
        "The PostgreSQL server the local provider's managed resources in this namespace live "
        "on; their backups go to the provider's --backup-dir, in a directory of the namespace."
    )
    return [cluster, local]


def generate() -> dict[str, dict[str, Any]]:
    """File name → CRD, for every namespaced kind."""
    crds: list[dict[str, Any]] = []
    for crd in load_crds(CRD_DIR):
        is_config = crd["spec"]["names"]["kind"] == "ProviderConfig"
        crds += provider_configs(crd) if is_config else [namespaced_managed(crd)]
    return {f"{M_GROUP}_{crd['spec']['names']['plural']}.yaml": crd for crd in crds}


def render(crd: dict[str, Any]) -> str:
    header = (
        f"# {crd['spec']['names']['kind']} ({crd['spec']['scope']}): generated from "
        "../ by python -m klutch_local.provider.crds; do not edit.\n"
    )
    return header + yaml.safe_dump(crd, sort_keys=False, width=100)


def write(directory: Path = NAMESPACED_CRD_DIR) -> list[Path]:
    directory.mkdir(exist_ok=True)
    written = []
    for name, crd in generate().items():
        path = directory / name
        path.write_text(render(crd))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write():
        print(path)
