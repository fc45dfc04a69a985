"""A tenant's repository as an attacker writes it, through a running reconciler on the real stack.

Every document the reconciler must refuse (README, "Desired state"): broken and hostile YAML (an
alias bomb, a file over the size limit), kinds a binding does not export (Secrets, ConfigMaps,
cluster-scoped kinds), namespaces the binding does not allow, schema violations and duplicates,
and symlinks that lead out of the repository (to the reconciler's own files or another tenant's
work clone). Each is refused in ``.klutch/reconcile.yaml`` with file, message and fix; nothing of
it reaches either cluster, and the good claims beside them converge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from klutch_gitops.kube.resources import SECRETS
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import WEBHOOK_SECRET, Tenant, make_tenant
from tests.kit.wait import eventually


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


BAD_INPUTS = {
    "claims/bad-yaml.yaml": "apiVersion: anynines.com/v1\nkind: [unclosed\n",
    "claims/not-a-mapping.yaml": "- just\n- a list\n",
    "claims/no-kind.yaml": "apiVersion: anynines.com/v1\nmetadata: {name: x, namespace: NS}\n",
    "claims/no-name.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {namespace: NS}\nspec: {service: a9s-postgresql13, "
    "plan: postgresql-single-nano}\n",
    "claims/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: NS}\n"
    "stringData: {password: hunter2}\n",
    "claims/unknown-kind.yaml": "apiVersion: anynines.com/v1\nkind: RedisCluster\n"
    "metadata: {name: r, namespace: NS}\n",
    "claims/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\n"
    "metadata: {name: c, namespace: NS}\n",
    "claims/cluster-scoped.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: evil}\n",
    "claims/no-namespace.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: nons}\nspec: {service: a9s-postgresql13, "
    "plan: postgresql-single-nano}\n",
    "claims/other-namespace.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: other, namespace: kube-system}\n"
    "spec: {service: a9s-postgresql13, plan: postgresql-single-nano}\n",
    "claims/wrong-version.yaml": "apiVersion: anynines.com/v2\nkind: PostgresqlInstance\n"
    "metadata: {name: v2, namespace: NS}\n",
    "claims/bad-plan.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: badplan, namespace: NS}\n"
    "spec: {service: a9s-postgresql13, plan: huge}\n",
    "claims/unknown-field.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: unk, namespace: NS}\nspec: {service: "
    "a9s-postgresql13, plan: postgresql-single-nano, color: red}\n",
    "claims/missing-required.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: noplan, namespace: NS}\n"
    "spec: {service: a9s-postgresql13}\n",
    "claims/wrong-type.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: wrongtype, namespace: NS}\nspec: {service: "
    "a9s-postgresql13, plan: postgresql-single-nano, "
    "parameters: {maxConnections: many}}\n",
    "claims/z-duplicate.yaml": "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
    "metadata: {name: good, namespace: NS}\nspec: {service: "
    "a9s-postgresql13, plan: postgresql-single-big}\n",
    "claims/alias-bomb.yaml": "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, "
    "*a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, "
    "*d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, "
    "*e]\n",
    "claims/huge.yaml": "# " + "x" * (1 << 20) + "\n",
}


def test_bad_inputs_are_reported_and_good_claims_converge(tenant: Tenant) -> None:
    commit_symlinks(tenant)
    files = {name: text.replace("NS", tenant.namespace) for name, text in BAD_INPUTS.items()}
    files["claims/good.yaml"] = claim("good", tenant.namespace)
    files["claims/also-good.yaml"] = claim("also-good", tenant.namespace)
    tenant.push(files, "a mixed push")

    for name in ("good", "also-good"):
        eventually(
            lambda name=name: tenant.control_plane.get(POSTGRES, tenant.mapped, name),
            f"good claim {name} upstream",
        )

    def report() -> dict | None:
        try:
            text = tenant.remote_file("claims/.klutch/reconcile.yaml")
            content = yaml.safe_load(text)["registrations"][tenant.spec.name]
        except Exception:
            return None
        return content if content["counts"]["claims"] == 2 else None

    content = eventually(report, "reconcile.yaml with every rejection")
    rejected_files = {r["file"] for r in content["rejections"]}
    expected = set(BAD_INPUTS) | set(ESCAPES)
    assert rejected_files == expected, expected ^ rejected_files
    assert len(BAD_INPUTS) >= 15
    for rejection in content["rejections"]:
        assert rejection["message"]
        assert rejection["fix"]
    by_file = {r["file"]: r for r in content["rejections"]}
    assert by_file["claims/bad-plan.yaml"]["field"].startswith("spec.plan")
    assert by_file["claims/other-namespace.yaml"]["field"] == "metadata.namespace"
    assert "claims/good.yaml" in by_file["claims/z-duplicate.yaml"]["message"]
    # the duplicate did not win: the first document's plan is live
    assert (
        tenant.control_plane.get(POSTGRES, tenant.mapped, "good")["spec"]["plan"]
        == "postgresql-single-nano"
    )
    assert tenant.app.get(SECRETS, tenant.namespace, "s") is None
    for name in ESCAPES:
        assert "leaves the repository" in by_file[name]["message"]
    report_text = tenant.remote_file("claims/.klutch/reconcile.yaml")
    assert "root:" not in report_text
    assert WEBHOOK_SECRET not in report_text


# Symlinks committed into the repository, and where they lead (outside it).
ESCAPES = {
    "claims/passwd.yaml": "/etc/passwd",
    "claims/webhook.yaml": "{work}/../webhook",  # the reconciler's own file: the webhook secret
    "claims/linked-folder": "/etc",
}


def commit_symlinks(tenant: Tenant) -> None:
    """What a tenant can push that no file editor shows: links out of the repository."""
    for name, target in ESCAPES.items():
        link = tenant.clone / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target.format(work=tenant.config.work_dir), link)
    git(tenant.clone, "add", "-A")
    git(tenant.clone, "commit", "-q", "-m", "links")
    git(tenant.clone, "push", "-q", "origin", "HEAD:main")
