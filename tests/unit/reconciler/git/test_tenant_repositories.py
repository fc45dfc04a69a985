"""The checks that keep a tenant's repository URL, branch and path from reaching git unchecked,
and the environment every git child runs in.

Git's behaviour the checks follow: git(1) ("GIT_ALLOW_PROTOCOL", "GIT_PROTOCOL_FROM_USER",
"GIT_SSH_COMMAND"), gitremote-helpers(7) (``<transport>::<address>`` runs git-remote-<transport>,
git-remote-ext(1) runs a command), git-check-ref-format(1) (branch names), and git's connect.c,
which refuses an ssh host or user starting with ``-`` ("strange hostname ... blocked",
CVE-2017-1000117); we refuse them before git sees them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from klutch_gitops.errors import KlutchError
from klutch_gitops.repository_config import from_repository_binding
from klutch_gitops.urls import (
    PLATFORM_TRANSPORTS,
    TENANT_TRANSPORTS,
    InvalidRepoURL,
    check_branch,
    check_repo_path,
    url_transport,
)
from reconciler.git.credentials import Credentials, git_environment, ssh_command
from reconciler.git.runner import fix_for

CRD = Path(__file__).resolve().parents[4] / "catalog" / "crds"
CRD_SPEC = yaml.safe_load((CRD / "gitops.klutch.anynines.com_repositorybindings.yaml").read_text())[
    "spec"
]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

TENANT_URLS = {
    "https://github.com/org/repo.git": "https",
    "https://127.0.0.1:8443/team.git": "https",
    "ssh://git@gitlab.example.com:2222/group/repo.git": "ssh",
    "ssh://gitlab.example.com/group/repo.git": "ssh",
    "git@github.com:org/repo.git": "ssh",
    "git@git.example.com:/srv/git/repo.git": "ssh",
}

REFUSED_FOR_TENANTS = {
    "file:///srv/git/other-team.git": "uses file, which is not allowed here",
    "file:///etc": "uses file, which is not allowed here",
    "/srv/git/other-team.git": "uses file, which is not allowed here",
    "http://git.example.com/org/repo.git": "uses http, which is not allowed here",
    "git://git.example.com/org/repo.git": "uses git, which is not allowed here",
    "ext::sh -c touch% /tmp/pwned": "names a git remote helper",
    "ext::sh": "names a git remote helper",
    "fd::3": "names a git remote helper",
    "ssh://-oProxyCommand=touch%20/tmp/pwned/repo": "is not a host name",
    "ssh://-oProxyCommand=x@git.example.com/repo": "is not a plain user name",
    "-oProxyCommand=x@git.example.com:repo": "is not a plain user name",
    "git@-oProxyCommand=x:repo": "is not a host name",
    "git@git.example.com:-oProxyCommand=x": "starts with '-'",
    "https://git.example.com/-repo": "starts with '-'",
    "https://git.example.com": "is empty",
    "https://bot:token@git.example.com/org/repo.git": "carries a password or token",
    "ssh://git:secret@git.example.com/org/repo.git": "carries a password or token",
    "https://git.example.com/org/repo\n.git": "whitespace, a control character",
    "https://git.example.com/org/re po.git": "whitespace, a control character",
    "https://git.example.com\\@evil.example/repo": "whitespace, a control character",
    "https://git.example.com:99999/org/repo": "not a number from 1 to 65535",
    "https://git..example.com/org/repo": "is not a host name",
    "git@file:///etc": "is not a repository URL",
    "https://git.example.com/" + "a" * 2048: "1 to 2048 characters",
}


@pytest.mark.parametrize(("url", "transport"), TENANT_URLS.items())
def test_tenants_get_https_and_ssh(url: str, transport: str) -> None:
    assert url_transport(url, TENANT_TRANSPORTS) == transport


@pytest.mark.parametrize(("url", "message"), REFUSED_FOR_TENANTS.items())
def test_tenant_urls_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidRepoURL, match=re.escape(message)) as refused:
        url_transport(url, TENANT_TRANSPORTS)
    assert "token" not in refused.value.message.replace("a password or token", "")
    assert "secret" not in refused.value.message
    assert refused.value.fix


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("file:///srv/git/platform.git", "file"),
        ("/srv/git/platform.git", "file"),
        ("http://gitea.internal:3000/platform/catalog.git", "http"),
        ("https://github.com/org/platform.git", "https"),
    ],
)
def test_the_platform_config_keeps_its_transports(url: str, transport: str) -> None:
    assert url_transport(url, PLATFORM_TRANSPORTS) == transport


@pytest.mark.parametrize(
    "url", ["ext::sh -c id", "ssh://-oProxyCommand=id/x", "file://other-host/srv/x.git"]
)
def test_the_platform_config_gets_no_remote_helper_or_option(url: str) -> None:
    with pytest.raises(InvalidRepoURL):
        url_transport(url, PLATFORM_TRANSPORTS)


@pytest.mark.parametrize("url", [*TENANT_URLS, *REFUSED_FOR_TENANTS])
def test_the_crd_pattern_is_never_looser_than_the_bind_api(url: str) -> None:
    """What the bind API accepts, the CRD accepts (else a bind fails half-way); what the CRD
    accepts and the reconciler refuses is refused in the RepositoryBinding's status."""
    crd = re.search(CRD_SPEC["url"]["pattern"], url) is not None and len(url) <= 2048
    try:
        url_transport(url, TENANT_TRANSPORTS)
        ours = True
    except InvalidRepoURL:
        ours = False
    assert crd == ours or (crd and not ours and url in CRD_ONLY)


# Valid for the CRD's pattern, refused by our parser (and so in the reconciler's status).
CRD_ONLY = {"https://git..example.com/org/repo", "https://git.example.com:99999/org/repo"}


@pytest.mark.parametrize(
    "branch", ["main", "release/1.2", "feature/JIRA-12_x", "klutch-status", "v1.0"]
)
def test_branches_git_accepts(branch: str) -> None:
    assert check_branch(branch) is None


@pytest.mark.parametrize(
    "branch",
    [
        "",
        "-x",
        "--upload-pack=touch /tmp/pwned",
        "main..other",
        "a/.hidden",
        ".hidden",
        "main.lock",
        "a.lock/b",
        "main@{1}",
        "@",
        "HEAD",
        "a//b",
        "/main",
        "main/",
        "main.",
        "ma in",
        "ma\tin",
        "a:b",
        "a~1",
        "a^",
        "a?",
        "a*",
        "a[b",
        "a\\b",
        "x" * 256,
    ],
)
def test_branches_git_refuses(branch: str) -> None:
    assert check_branch(branch)


@pytest.mark.parametrize("path", [".", "claims", "team/claims", "a b", "./claims"])
def test_paths_inside_the_repository(path: str) -> None:
    assert check_repo_path(path) is None


@pytest.mark.parametrize(
    "path", ["", "/etc", "../other", "a/../../b", "..", "-x", ".git", "a/.git/hooks", "a\x00b"]
)
def test_paths_refused(path: str) -> None:
    assert check_repo_path(path)


def binding(**spec: object) -> dict:
    return {
        "metadata": {"name": "orders", "namespace": "cluster-abc"},
        "spec": {
            "url": "https://git.example/team/orders.git",
            "appNamespaces": ["orders"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"url": "file:///srv/git/other-team.git"}, "spec.url: 'file:///srv/git/other-team.git'"),
        ({"url": "file:///etc"}, "uses file, which is not allowed here"),
        ({"url": "git@git.example.com:-oProxyCommand=x"}, "spec.url: the path"),
        ({"branch": "-x"}, "spec.branch: '-x' must not start with '-'"),
        ({"branch": "a..b"}, "spec.branch: 'a..b' must not hold '..'"),
        ({"writeBack": {"mode": "branch", "branch": "x.lock"}}, "spec.writeBack.branch"),
        ({"path": "../other"}, "spec.path"),
        ({"path": "-x"}, "spec.path: '-x' must be relative"),
    ],
)
def test_a_repository_binding_is_checked_as_tenant_input(spec: dict, message: str) -> None:
    with pytest.raises(KlutchError, match=re.escape(message)) as refused:
        from_repository_binding(binding(**spec))
    assert refused.value.message.startswith("RepositoryBinding cluster-abc/orders: ")


def test_a_good_repository_binding_passes() -> None:
    spec = from_repository_binding(binding(url="git@github.com:team/orders.git", path="claims"))
    assert (spec.url, spec.path) == ("git@github.com:team/orders.git", "claims")


def test_git_runs_with_one_transport_and_none_from_a_repository() -> None:
    env = git_environment("https", Credentials())
    assert env["GIT_ALLOW_PROTOCOL"] == "https"
    assert env["GIT_PROTOCOL_FROM_USER"] == "0"
    assert env["GIT_TERMINAL_PROMPT"] == "0"


def test_ssh_takes_nothing_from_outside_the_registration(tmp_path: Path) -> None:
    """ssh_config(5): -F /dev/null skips ~/.ssh/config and /etc/ssh/ssh_config (ProxyCommand,
    agent forwarding, default keys); IdentityFile/IdentityAgent none, StrictHostKeyChecking yes."""
    argv = shlex.split(ssh_command(None, None))
    assert argv[:3] == ["ssh", "-F", "/dev/null"]
    options = dict(argv[i + 1].split("=", 1) for i in range(3, len(argv), 2))
    assert options == {
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "IdentityFile": "none",
        "IdentityAgent": "none",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ClearAllForwardings": "yes",
        "PermitLocalCommand": "no",
        "ProxyCommand": "none",
        "ProxyJump": "none",
        "ControlMaster": "no",
        "ControlPath": "none",
    }
    key, hosts = tmp_path / "key", tmp_path / "known_hosts"
    own = dict(arg.split("=", 1) for arg in shlex.split(ssh_command(key, hosts)) if "=" in arg)
    assert (own["IdentityFile"], own["UserKnownHostsFile"]) == (str(key), str(hosts))


def test_an_unknown_ssh_host_key_names_the_fix() -> None:
    """ssh refuses a host missing from the registration's known_hosts; the error says where the
    key goes instead of the generic "check the URL"."""
    refused = "Host key verification failed.\nfatal: Could not read from remote repository."
    assert "known_hosts key of the credentials Secret" in fix_for(refused, "generic")
    assert "--known-hosts" in fix_for(refused, "generic")
    assert fix_for("Connection refused", "generic") == "generic"
