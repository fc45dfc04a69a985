"""Repository URLs, branches and paths from tenants, attacked on the real stack: the real bind API
with a real Dex token, the RepositoryBinding CRD on the real Control Plane, a real reconciler, real
git and OpenSSH.

Before: a bind for ``file:///…/another-tenants.git`` applied that tenant's claims for the attacker
and the bot pushed into it; ``file:///etc`` was accepted. Now tenants get https and ssh only, and
git runs with one transport and no option from a tenant.

How the peers behave, from their sources and documentation:
- git-remote-ext(1) / gitremote-helpers(7): ``ext::<command>`` runs the command; git's
  Documentation/config/protocol.txt: ``GIT_ALLOW_PROTOCOL`` is the list of transports git may use
  ("file" covers file:// and local paths), ``GIT_PROTOCOL_FROM_USER=0`` refuses those of policy
  "user".
- git's connect.c (fill_ssh_args): "strange hostname '%s' blocked" for a user@host starting with
  ``-`` (CVE-2017-1000117); ssh would read ``-oProxyCommand=…`` as an option.
- ssh_config(5): ``-F /dev/null`` reads no configuration file; ``IdentityFile none``,
  ``IdentityAgent none``, ``ProxyCommand none``, ``ProxyJump none``; ``StrictHostKeyChecking yes``
  never adds a host key; ``ssh -G`` prints the configuration ssh would use.
"""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from bind_api.server import build_server
from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.consumer import consumer_namespace
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from klutch_gitops.oidc_client import unverified_claims
from reconciler.git.checkout import Checkout
from reconciler.git.credentials import Credentials, git_environment, ssh_command
from reconciler.git.remote import ls_remote
from reconciler.manager import Reconciler
from tests.integration.bindapi import API, bind_api_config, dev_id_token, offered_api, serving
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import quick_config, repository_binding
from tests.kit.wait import eventually

CRD_NAME = "repositorybindings.gitops.klutch.anynines.com"


@dataclass(frozen=True)
class Victim:
    """Another tenant's repository on the reconciler's disk, with a claim in it."""

    remote: Path
    namespace: str  # the App namespace its claim names

    def refs(self) -> str:
        return git(self.remote, "for-each-ref", "--format=%(refname) %(objectname)")


@pytest.fixture
def victim(tmp_path: Path) -> Victim:
    remote, clone = tmp_path / "victim.git", tmp_path / "victim"
    namespace = f"victim-{uuid.uuid4().hex[:6]}"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    (clone / "claims").mkdir()
    (clone / "claims" / "db.yaml").write_text(claim("victim-db", namespace))
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=Victim", "-c", "user.email=v@example.com", "commit", "-qm", "db")
    git(clone, "push", "-q", "origin", "HEAD:main")
    return Victim(remote, namespace)


@pytest.fixture(scope="module")
def bind_api(stack: StackInfo, clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    """The real bind API on a loopback port, offering ``API`` to the dev user."""
    with offered_api(clusters, "a-secrepo"), serving(build_server(bind_api_config(stack))) as url:
        yield url


def attacks(victim: Victim, marker: Path) -> dict[str, tuple[dict[str, Any], str, str]]:
    """Repository fields of a bind request: (fields, refused field, words of the message)."""
    return {
        "other-tenants-repository": (
            {"url": f"file://{victim.remote}"},
            "url",
            "uses file, which is not allowed here (allowed: https, ssh)",
        ),
        "etc": ({"url": "file:///etc"}, "url", "uses file, which is not allowed here"),
        "ext-command": (
            {"url": f"ext::sh -c touch% {marker}"},
            "url",
            "names a git remote helper (transport::address)",
        ),
        "ssh-option-host": (
            {"url": f"ssh://-oProxyCommand=touch%20{marker.name}/team/claims.git"},
            "url",
            "is not a host name or address",
        ),
        "ssh-option-path": (
            {"url": "git@git.example.com:--upload-pack=touch"},
            "url",
            "is empty or starts with '-'",
        ),
        "option-branch": (
            {"branch": f"--upload-pack=touch {marker}"},
            "branch",
            "the branch must not start with '-'",
        ),
        "dotdot-branch": ({"branch": "main..evil"}, "branch", "must not hold '..'"),
        "parent-path": ({"path": "../other-team"}, "path", "must not contain '..' or '.git'"),
        "option-path": ({"path": "-claims"}, "path", "must not start with '-'"),
        # 900,000 characters of one scheme-like run: redact() scanned it from every position
        "huge-url": ({"url": "a" * 900_000}, "url", "must have 1 to 2048 characters"),
    }


ATTACKS = [
    "other-tenants-repository",
    "etc",
    "ext-command",
    "ssh-option-host",
    "ssh-option-path",
    "option-branch",
    "dotdot-branch",
    "parent-path",
    "option-path",
    "huge-url",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_bind_api_refuses_a_hostile_repository_before_binding(
    attack: str,
    bind_api: str,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    victim: Victim,
    tmp_path: Path,
) -> None:
    admin = Kube(clusters["control-plane"])
    marker = tmp_path / "pwned"
    fields, field, message = attacks(victim, marker)[attack]
    repository = {
        "url": "https://git.example.com/team/claims.git",
        "appNamespaces": [victim.namespace],
        "path": "claims",
        **fields,
    }
    token = dev_id_token(stack)
    cluster_id = f"attacker-{uuid.uuid4().hex[:8]}"
    namespaces_before = {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]}
    refs_before = victim.refs()
    response = httpx.post(
        f"{bind_api}/api/v1/bindings",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "clusterId": cluster_id,
            "apis": [API],
            "repository": repository,
            "appKubeconfig": Path(stack.clusters["app"].kubeconfig).read_text(),
        },
        timeout=30,
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "repository", field]
    assert error["msg"].startswith("Value error, "), error["msg"]
    assert message in error["msg"], error["msg"]

    # nothing bound, registered, fetched, pushed or run
    consumer = consumer_namespace(unverified_claims(token)["sub"], cluster_id)
    assert admin.get(NAMESPACES, None, consumer) is None
    # only new ones count: another module's namespaces may finish terminating meanwhile
    assert {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]} - namespaces_before == set()
    bindings, _ = admin.list(REPOSITORY_BINDINGS)
    assert not [b for b in bindings if b["spec"]["url"] == repository["url"] and attack != "etc"]
    assert not [b for b in bindings if "file://" in b["spec"]["url"]]
    assert victim.refs() == refs_before
    assert not marker.exists()


@pytest.mark.parametrize(
    "url",
    ["file:///etc", "ext::sh -c touch% /tmp/pwned", "git@git.example.com:-oProxyCommand=x"],
    ids=["etc", "ext", "ssh-option"],
)
def test_the_crd_refuses_a_repository_binding_for_a_local_repository(
    url: str, clusters: dict[str, client.ApiClient], namespace: Any, victim: Victim
) -> None:
    """A tenant with write access to its consumer namespace creates a RepositoryBinding
    directly: the apiserver refuses it with the CRD's pattern."""
    install_crds(clusters["control-plane"], load_crds(cluster="control-plane"))
    admin = Kube(clusters["control-plane"])
    for target in (url, f"file://{victim.remote}"):
        with pytest.raises(KubeError) as refused:
            admin.create(
                REPOSITORY_BINDINGS,
                repository_binding(
                    namespace.name, "attack", target, victim.namespace, app_ref="app"
                ),
            )
        assert refused.value.status == 422
        assert "spec.url: Invalid value" in refused.value.message
        assert "should match '^(https://" in refused.value.message
        assert admin.get(REPOSITORY_BINDINGS, namespace.name, "attack") is None


def relaxed_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """The RepositoryBinding CRD as an older release had it: any URL (file:// included)."""
    url = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["url"]
    url["pattern"] = "^.+$"
    return crd


def test_the_reconciler_refuses_a_file_repository_binding_that_predates_the_crd(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: Any,
    victim: Victim,
    tmp_path: Path,
) -> None:
    """A file:// RepositoryBinding stored before the CRD refused them (an older CRD stands in
    for the upgrade): the reconciler refuses it with the reason in its status, never clones the
    other tenant's repository, applies none of its claims and pushes nothing into it."""
    admin, app = Kube(clusters["control-plane"]), Kube(clusters["app"])
    consumer = namespace.name
    app.create(NAMESPACES, {"metadata": {"name": victim.namespace}})
    kubeconfig = Path(stack.clusters["app"].kubeconfig).read_text()
    for name in ("app", "binder"):
        admin.create(
            SECRETS,
            {
                "metadata": {"name": name, "namespace": consumer},
                "stringData": {"kubeconfig": kubeconfig},
            },
        )
    refs_before = victim.refs()
    config = quick_config(stack, tmp_path)
    reconciler = Reconciler(config).start(serve_http=False)  # installs today's CRDs first
    crds = load_crds(cluster="control-plane")
    (current,) = [c for c in crds if c["metadata"]["name"] == CRD_NAME]
    try:
        install_crds(clusters["control-plane"], [relaxed_crd(current)])
        body = repository_binding(
            consumer, "attack", f"file://{victim.remote}", victim.namespace, app_ref="app"
        )
        eventually(
            lambda: _created(admin, body), "the older CRD to take a file:// RepositoryBinding"
        )

        def refused() -> dict | None:
            status = (admin.get(REPOSITORY_BINDINGS, consumer, "attack") or {}).get("status")
            conditions = {c["type"]: c for c in (status or {}).get("conditions") or []}
            ready = conditions.get("Ready") or {}
            return ready if ready.get("reason") == "InvalidSpec" else None

        ready = eventually(refused, "Ready=False, InvalidSpec on the RepositoryBinding", 60)
        assert ready["status"] == "False"
        assert ready["message"].startswith(f"RepositoryBinding {consumer}/attack: spec.url: ")
        assert "uses file, which is not allowed here (allowed: https, ssh)" in ready["message"]
        assert "fix the RepositoryBinding's spec" in ready["message"]

        time.sleep(3.0)  # three poll intervals: a followed repository would be cloned by now
        registration = f"{consumer}.attack"
        assert registration not in reconciler.syncs
        assert not (tmp_path / "work" / registration).exists()
        assert app.get(POSTGRES, victim.namespace, "victim-db") is None
        assert victim.refs() == refs_before
        # our status write came back as an event: it is not written again and again
        version = admin.get(REPOSITORY_BINDINGS, consumer, "attack")["metadata"]["resourceVersion"]
        time.sleep(1.0)
        again = admin.get(REPOSITORY_BINDINGS, consumer, "attack")["metadata"]["resourceVersion"]
        assert again == version
    finally:
        reconciler.stop()
        admin.delete(REPOSITORY_BINDINGS, consumer, "attack")
        install_crds(clusters["control-plane"], crds)
        app.delete(NAMESPACES, None, victim.namespace)


def _created(admin: Kube, body: dict[str, Any]) -> bool:
    try:
        admin.create(REPOSITORY_BINDINGS, body)
    except KubeError as error:
        if error.status == 422:
            return False  # the apiserver still validates with the newer schema
        raise
    return True


# -- git and ssh themselves, without the stack ------------------------------------------------


def test_git_refuses_every_transport_but_the_registrations(victim: Victim, tmp_path: Path) -> None:
    """Even a URL that got past every check reaches nothing: git may use the registration's
    own transport only (an https registration gets no file:// and no ext::)."""
    marker = tmp_path / "pwned"
    env = git_environment("https", Credentials())
    refs_before = victim.refs()
    cases = ((f"file://{victim.remote}", "file"), (f"ext::sh -c touch% {marker}", "ext"))
    for url, transport in cases:
        result = subprocess.run(
            ["git", "ls-remote", "--", url],
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode != 0
        assert f"transport '{transport}' not allowed" in result.stderr
    assert not marker.exists()
    assert victim.refs() == refs_before


@pytest.mark.parametrize(
    "url", ["ext::sh -c touch% {marker}", "ssh://-oProxyCommand=touch%20{marker}/x"]
)
def test_the_git_layer_refuses_before_git_runs(url: str, tmp_path: Path) -> None:
    """ls_remote and Checkout check the URL before git sees it, whoever registered it: even the
    platform's config file gets no command or ssh option through."""
    marker = tmp_path / "pwned"
    url = url.format(marker=marker)
    for attempt in (
        lambda: ls_remote(url, "main", timeout=10),
        lambda: Checkout.open_or_clone(url, "main", tmp_path / "clone", timeout=10),
    ):
        with pytest.raises(KlutchError, match=r"remote helper|not a host name"):
            attempt()
    assert not marker.exists()
    assert not (tmp_path / "clone").exists()


def test_a_branch_option_never_reaches_git(victim: Victim, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for branch in (f"--upload-pack=touch {marker}", "main..x", "x.lock"):
        with pytest.raises(KlutchError, match="name a branch that git check-ref-format accepts"):
            ls_remote(str(victim.remote), branch, timeout=10)
    assert not marker.exists()


def test_ssh_runs_with_nothing_from_outside_the_registration(tmp_path: Path) -> None:
    """OpenSSH's own resolution (ssh -G) of the command git runs: a ProxyCommand, agent, key or
    host-key file from any ssh_config never applies, and nothing is trusted on first use."""
    hostile = tmp_path / "ssh_config"
    hostile.write_text(
        "Host *\n  ProxyCommand touch /tmp/pwned\n  ForwardAgent yes\n"
        "  IdentityFile ~/.ssh/platform_deploy_key\n  StrictHostKeyChecking accept-new\n"
    )
    # the attack works where ssh reads a config file ...
    plain = subprocess.run(
        ["ssh", "-F", str(hostile), "-G", "git@git.example.com"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "proxycommand touch /tmp/pwned" in plain
    # ... and the reconciler's ssh reads none
    argv = [*shlex.split(ssh_command(None, None)), "-G", "git@git.example.com"]
    resolved = dict(
        line.split(" ", 1)
        for line in subprocess.run(argv, capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()
        if " " in line
    )
    assert "proxycommand" not in resolved
    assert "proxyjump" not in resolved
    assert resolved["identityfile"] == "none"
    assert resolved["identityagent"] == "none"
    assert resolved["forwardagent"] == "no"
    assert resolved["stricthostkeychecking"] == "true"
    assert resolved["userknownhostsfile"] == "/dev/null"
    assert resolved["batchmode"] == "yes"
    key, hosts = tmp_path / "id", tmp_path / "known_hosts"
    own = subprocess.run(
        [*shlex.split(ssh_command(key, hosts)), "-G", "git@git.example.com"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"identityfile {key}" in own
    assert f"userknownhostsfile {hosts}" in own
