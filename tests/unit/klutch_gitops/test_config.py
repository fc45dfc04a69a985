"""The config file: every problem reported at once, with field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from klutch_gitops.config import LeaderElection, PlatformSpec, SecretRef
from klutch_gitops.config_file import parse_config
from klutch_gitops.errors import KlutchError
from klutch_gitops.repository_config import from_repository_binding

GOOD = """
controlPlane: {kubeconfig: cp.kubeconfig}
pollInterval: 10s
batchWindow: 500ms
repositories:
  - name: team-a
    url: file:///srv/team-a.git
    path: claims
    consumerNamespace: cluster-abc
    appNamespaces: [team-a]
    appCluster: {kubeconfig: /etc/app.kubeconfig}
    controlPlane: {kubeconfigSecretRef: {namespace: cluster-abc, name: binder}}
    webhookSecret: {env: TEAM_A_WEBHOOK}
    writeBack: {mode: files, author: {name: Bot, email: bot@example.com}}
"""


def test_a_good_config(tmp_path: Path) -> None:
    config = parse_config(GOOD, "c.yaml", tmp_path)
    assert config.control_plane_kubeconfig == tmp_path / "cp.kubeconfig"
    assert (config.poll_interval, config.batch_window) == (10.0, 0.5)
    [repo] = config.repositories
    assert (repo.branch, repo.path) == ("main", "claims")
    assert repo.app_kubeconfig == SecretRef(file=Path("/etc/app.kubeconfig"))
    assert repo.control_plane_kubeconfig == SecretRef(
        namespace="cluster-abc", name="binder", key="kubeconfig"
    )
    assert repo.webhook_secret == SecretRef(env="TEAM_A_WEBHOOK")
    assert repo.write_back.mode == "files"
    assert repo.write_back.author is not None
    assert repo.write_back.author.email == "bot@example.com"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    bad = """
controlPlane: {}
colour: blue
workers: 0
repositories:
  - name: Team_A
    url: ftp://example.com/x
    path: ../outside
    consumerNamespace: cluster-abc
    appNamespaces: []
    appCluster: {kubeconfig: a}
    controlPlane: {kubeconfig: b}
    writeBack: {mode: sometimes}
    pollInterval: soon
"""
    with pytest.raises(KlutchError) as raised:
        parse_config(bad, "bad.yaml", tmp_path)
    text = str(raised.value)
    for expected in (
        "controlPlane.kubeconfig: is required",
        "colour: unknown field",
        "workers: 0 is not a number from 1 to 64",
        "repositories[0].name: 'Team_A' is not valid",
        "repositories[0].url: 'ftp://example.com/x' is not valid",
        "repositories[0].path: '../outside' must not contain '..'",
        "repositories[0].appNamespaces: must be a non-empty list",
        "repositories[0].writeBack.mode: 'sometimes' is not one of 'inline', 'files' or 'branch'",
        "repositories[0].pollInterval: 'soon' is not a duration",
    ):
        assert expected in text, expected
    assert text.startswith("bad.yaml: 9 problem(s)")


def test_duplicate_names_and_bad_yaml(tmp_path: Path) -> None:
    repo = GOOD.split("repositories:\n")[1]
    with pytest.raises(KlutchError, match="used more than once"):
        parse_config(GOOD + repo, "c.yaml", tmp_path)
    with pytest.raises(KlutchError, match="not valid YAML"):
        parse_config("repositories: [", "c.yaml", tmp_path)


def test_repository_binding_becomes_a_registration() -> None:
    spec = from_repository_binding(
        {
            "metadata": {"name": "orders", "namespace": "cluster-abc"},
            "spec": {
                "url": "https://git.example/team/orders.git",
                "branch": "main",
                "path": ".",
                "appNamespaces": ["orders"],
                "appCluster": {"kubeconfigSecretRef": {"name": "app", "key": "kubeconfig"}},
                "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
                "credentialsSecretRef": {"name": "git"},
                "webhookSecretRef": {"name": "hook", "key": "token"},
                "writeBack": {"mode": "branch", "branch": "status"},
            },
        }
    )
    assert spec.name == "cluster-abc.orders"
    assert spec.consumer_namespace == "cluster-abc"
    assert spec.app_kubeconfig == SecretRef(namespace="cluster-abc", name="app", key="kubeconfig")
    assert spec.control_plane_kubeconfig.key == "kubeconfig"
    assert spec.credentials is not None
    assert spec.credentials.secret.name == "git"
    assert spec.webhook_secret == SecretRef(namespace="cluster-abc", name="hook", key="token")
    assert (spec.write_back.mode, spec.write_back.branch) == ("branch", "status")


def test_the_documented_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "reconciler.yaml"
    config = parse_config(example.read_text(), str(example), example.parent)
    assert [r.name for r in config.repositories] == ["team-a", "team-b"]
    assert config.platform is not None
    assert config.platform.webhook_secret == SecretRef(env="PLATFORM_WEBHOOK_SECRET")
    assert config.leader_election == LeaderElection(
        False, "klutch-system", "klutch-gitops-reconciler", 15.0, 10.0, 2.0, 0
    )


def test_app_sync_is_read_and_checked(tmp_path: Path) -> None:
    [repo] = parse_config(GOOD, "c.yaml", tmp_path).repositories
    assert repo.app_sync == "reconciler"
    external = GOOD + "    appSync: external\n"
    assert parse_config(external, "c.yaml", tmp_path).repositories[0].app_sync == "external"
    with pytest.raises(KlutchError, match=r"repositories\[0\].appSync: 'argocd' is not"):
        parse_config(GOOD + "    appSync: argocd\n", "c.yaml", tmp_path)
    binding = {
        "metadata": {"name": "orders", "namespace": "cluster-abc"},
        "spec": {
            "url": "https://git.example/team/orders.git",
            "appNamespaces": ["orders"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
            "appSync": "external",
        },
    }
    assert from_repository_binding(binding).app_sync == "external"
    with pytest.raises(KlutchError, match=r"spec\.appSync"):
        from_repository_binding({**binding, "spec": {**binding["spec"], "appSync": "flux"}})


def test_forge_token_is_a_checked_reference(tmp_path: Path) -> None:
    [repo] = parse_config(GOOD, "c.yaml", tmp_path).repositories
    assert repo.forge_token is None
    with_token = GOOD + "    forgeToken: {file: forge-token}\n"
    [repo] = parse_config(with_token, "c.yaml", tmp_path).repositories
    assert repo.forge_token == SecretRef(file=tmp_path / "forge-token")
    with pytest.raises(KlutchError, match=r"repositories\[0\].forgeToken: needs exactly one of"):
        parse_config(GOOD + "    forgeToken: {file: a, env: B}\n", "c.yaml", tmp_path)
    binding = {
        "metadata": {"name": "orders", "namespace": "cluster-abc"},
        "spec": {
            "url": "https://git.example/team/orders.git",
            "appNamespaces": ["orders"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
            "forgeTokenSecretRef": {"name": "forge"},
        },
    }
    assert from_repository_binding(binding).forge_token == SecretRef(
        namespace="cluster-abc", name="forge", key="token"
    )


def test_a_repository_binding_reads_secrets_of_its_own_namespace_only() -> None:
    """A ``namespace`` key that an older CRD did not prune never reaches another tenant's Secret."""
    binding = {
        "metadata": {"name": "orders", "namespace": "cluster-attacker"},
        "spec": {
            "url": "https://git.example/team/orders.git",
            "appNamespaces": ["orders"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app", "namespace": "cluster-victim"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "b", "namespace": "cluster-victim"}},
            "webhookSecretRef": {"name": "hook", "key": "secret", "namespace": "cluster-victim"},
            "forgeTokenSecretRef": {"name": "forge", "namespace": "cluster-victim"},
        },
    }
    spec = from_repository_binding(binding)
    refs = (
        spec.app_kubeconfig,
        spec.control_plane_kubeconfig,
        spec.webhook_secret,
        spec.forge_token,
    )
    assert {ref.namespace for ref in refs if ref is not None} == {"cluster-attacker"}
    assert spec.webhook_secret == SecretRef(namespace="cluster-attacker", name="hook", key="secret")


def test_leader_election_is_off_by_default_and_checked(tmp_path: Path) -> None:
    assert parse_config(GOOD, "c.yaml", tmp_path).leader_election == LeaderElection(
        False, "", "klutch-gitops-reconciler", 15.0, 10.0, 2.0, 0
    )
    on = GOOD + "leaderElection: {enabled: true, namespace: klutch, retryPeriod: 500ms}\n"
    assert parse_config(on, "c.yaml", tmp_path).leader_election == LeaderElection(
        True, "klutch", "klutch-gitops-reconciler", 15.0, 10.0, 0.5, 0
    )
    bad = GOOD + (
        "leaderElection:\n"
        "  enabled: yes please\n"
        "  name: Not_A_Name\n"
        "  leaseDuration: 10s\n"
        "  renewDeadline: 10s\n"
        "  renewInterval: 2s\n"
    )
    with pytest.raises(KlutchError) as raised:
        parse_config(bad, "c.yaml", tmp_path)
    message = raised.value.message
    assert "leaderElection.enabled: must be true or false, got 'yes please'" in message
    assert "leaderElection.name: 'Not_A_Name' is not valid" in message
    assert "leaderElection: needs leaseDuration > renewDeadline > retryPeriod" in message
    assert "leaderElection.renewInterval: unknown field — did you mean renewDeadline?" in message
    with pytest.raises(KlutchError, match=r"leaderElection.namespace: is required"):
        parse_config(GOOD + "leaderElection: {enabled: true}\n", "c.yaml", tmp_path)


def test_shards_need_leader_election_and_a_sane_count(tmp_path: Path) -> None:
    on = GOOD + "leaderElection: {enabled: true, namespace: klutch, shards: 16}\n"
    assert parse_config(on, "c.yaml", tmp_path).leader_election.shards == 16
    for value, error in [
        ("{shards: 4}", "leaderElection.shards: shards need the Leases of leader election"),
        ("{enabled: true, namespace: k, shards: 300}", "300 is not a number from 0 to 256"),
        ("{enabled: true, namespace: k, shards: -1}", "-1 is not a number from 0 to 256"),
        ("{enabled: true, namespace: k, shards: true}", "must be a whole number, got True"),
    ]:
        with pytest.raises(KlutchError, match=error):
            parse_config(GOOD + f"leaderElection: {value}\n", "c.yaml", tmp_path)


def test_repositories_must_be_a_list_and_the_platform_needs_a_url(tmp_path: Path) -> None:
    text = "controlPlane: {kubeconfig: a}\nrepositories: {name: a}\nplatform: {branch: main}\n"
    with pytest.raises(KlutchError) as raised:
        parse_config(text, "c.yaml", tmp_path)
    assert raised.value.message.splitlines()[1:] == [
        "  platform.url: is required — use a file://, https://, ssh:// or git@host:path URL",
        "  repositories: must be a list, got a mapping — write each item on its own `- ` line",
    ]
    platform = parse_config(
        "controlPlane: {kubeconfig: a}\nplatform: {url: https://git.example/p}\n", "c", tmp_path
    ).platform
    assert platform == PlatformSpec("https://git.example/p", "main", ".", None, None)
