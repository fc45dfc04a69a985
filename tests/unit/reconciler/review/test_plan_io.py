"""`klutch-gitops plan` offline: both trees from a real Git repository, the catalog's schemas,
the merge Git would make, and the CLI's exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from klutch_gitops.catalog import load_examples
from klutch_gitops.errors import KlutchError
from reconciler.git.local import LocalRepository
from reconciler.git.runner import GitFailed
from reconciler.review.plan import Action
from reconciler.review.plan_io import Target, _location, catalog_exports, run_plan
from reconciler.sync.desired import load_desired

CLI = [sys.executable, "-m", "klutch_gitops.cli"]


def instance(name: str, plan: str = "postgresql-single-small", extra: str = "") -> str:
    return f"""apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: {name}
  namespace: team
{extra}spec:
  service: a9s-postgresql14
  plan: {plan}
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Person")
    git(repo, "config", "user.email", "person@example.com")
    commit(repo, {"claims/orders.yaml": instance("orders")}, "base")
    return repo


def branch(repo: Path, name: str, files: dict[str, str | None], start: str = "main") -> None:
    git(repo, "checkout", "-q", "-b", name, start)
    commit(repo, files, name)
    git(repo, "checkout", "-q", "main")


def test_every_catalog_example_passes_the_offline_schemas() -> None:
    exports = catalog_exports()
    assert {kind for _, kind in exports} >= {"PostgresqlInstance", "ServiceBinding", "Restore"}
    for example in load_examples():
        group, _, version = example["apiVersion"].rpartition("/")
        export = exports[(group, example["kind"])]
        assert version in export.schemas


def test_offline_plan_of_a_branch(repo: Path) -> None:
    branch(
        repo,
        "feature",
        {
            "claims/orders.yaml": instance("orders", "postgresql-single-big"),
            "claims/cache.yaml": instance("cache"),
        },
    )
    plan = run_plan(repo, "main", "feature", [Target("claims", "claims")])
    (binding,) = plan.bindings
    assert [(c.action, c.identity.name) for c in binding.changes] == [
        (Action.CHANGE, "orders"),
        (Action.CREATE, "cache"),
    ]
    assert binding.changes[0].destructive == "restarts the service (spec.plan)"
    assert plan.exit_code == 0
    assert plan.base == git(repo, "rev-parse", "main")
    assert git(repo, "status", "--porcelain") == ""  # the repository is left as it was
    assert "Offline" in binding.notes[0]


def test_a_branch_behind_its_base_does_not_revert_the_base(repo: Path) -> None:
    branch(repo, "feature", {"claims/cache.yaml": instance("cache")})
    commit(repo, {"claims/late.yaml": instance("late")}, "merged meanwhile")
    plan = run_plan(repo, "main", "feature", [Target("claims", "claims")])
    assert [(c.action, c.identity.name) for c in plan.bindings[0].changes] == [
        (Action.CREATE, "cache")
    ]


def test_refused_documents_and_protected_deletions_fail_the_plan(repo: Path) -> None:
    protected = '  annotations:\n    gitops.klutch.anynines.com/deletion-protection: "true"\n'
    commit(repo, {"claims/keep.yaml": instance("keep", extra=protected)}, "protected")
    branch(
        repo,
        "feature",
        {"claims/keep.yaml": None, "claims/bad.yaml": instance("bad") + "  sizze: big\n"},
    )
    plan = run_plan(repo, "main", "feature", [Target("claims", "claims")])
    failures = plan.failures()
    assert plan.exit_code == 1
    assert [f.subject for f in failures] == [
        "PostgresqlInstance.anynines.com team/bad in claims/bad.yaml (document 1)",
        "delete PostgresqlInstance.anynines.com team/keep (claims/keep.yaml)",
    ]
    assert failures[0].message == "spec.sizze: unknown field spec.sizze"
    assert "deletion-protected" in failures[1].message


def test_a_symlink_out_of_the_repository_is_refused_not_followed(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "claims" / "secret.yaml").symlink_to("/etc/passwd")
    commit(repo, {}, "link")
    git(repo, "checkout", "-q", "main")
    plan = run_plan(repo, "main", "feature", [Target("claims", "claims")])
    (refused,) = plan.bindings[0].refused
    assert refused.message == "symlink leaves the repository"


def test_conflicts_and_unknown_refs_are_errors(repo: Path) -> None:
    branch(repo, "one", {"claims/orders.yaml": instance("orders", "postgresql-single-big")})
    branch(repo, "two", {"claims/orders.yaml": instance("orders", "postgresql-single-nano")})
    git(repo, "merge", "-q", "one")
    with pytest.raises(KlutchError, match=r"conflicts in: claims/orders.yaml"):
        run_plan(repo, "main", "two", [Target("claims", "claims")])
    with pytest.raises(KlutchError, match="'nope' is not a commit"):
        run_plan(repo, "main", "nope", [Target("claims", "claims")])


def test_a_folder_that_is_no_repository_is_an_error(tmp_path: Path) -> None:
    for folder in (tmp_path, tmp_path / "missing"):
        with pytest.raises(KlutchError, match="is not a Git repository") as raised:
            run_plan(folder, "main", "main", [Target("claims", "claims")])
        assert raised.value.fix == "pass --repo a clone that holds both commits"


def test_the_repository_is_read_without_any_transport(repo: Path, tmp_path: Path) -> None:
    """Local commands only: git may not use even the file transport for a remote the
    repository's config names (a promisor fetch, say)."""
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", "--bare", str(other))
    git(repo, "remote", "add", "origin", f"file://{other}")
    local = LocalRepository(repo)
    assert local.remote_urls() == [f"file://{other}"] * 2  # fetch and push
    with pytest.raises(GitFailed, match="transport 'file' not allowed"):
        local._run("fetch", "origin")  # what any command of the plan would be refused


def test_the_loader_reads_the_merge_like_a_clone(repo: Path) -> None:
    """The plan's trees are what the reconciler's loader would read in its own clone."""
    plan = run_plan(repo, "main", "main", [Target("claims", "claims")])
    assert plan.bindings[0].changes == ()
    loaded = load_desired(repo, "claims", catalog_exports())
    assert [c.identity.name for c in loaded.claims] == ["orders"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("https://token@git.example.com/team/orders.git", "git@git.example.com:team/orders"),
        ("ssh://git@git.example.com/team/orders", "https://git.example.com/team/orders/"),
        ("file:///srv/git/orders.git", "/srv/git/orders"),
    ],
)
def test_repository_locations_compare_across_spellings(one: str, other: str) -> None:
    assert _location(one) == _location(other) != ""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "plan", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_cli_exit_codes_and_outputs(repo: Path) -> None:
    branch(repo, "clean", {"claims/cache.yaml": instance("cache")})
    branch(repo, "broken", {"claims/cache.yaml": "kind: [unclosed\n"})
    clean = run("--repo", str(repo), "--base", "main", "--head", "clean", "-o", "json")
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["counts"]["create"] == 1
    broken = run("--repo", str(repo), "--base", "main", "--head", "broken", "--path", "claims")
    assert broken.returncode == 1
    assert broken.stdout.startswith("## klutch-gitops plan: ❌ 1 failure")
    missing = run("--repo", str(repo), "--base", "main", "--head", "nope")
    assert missing.returncode == 2
    assert "is not a commit" in missing.stderr
    assert "Traceback" not in missing.stderr
    usage = run(
        "--repo", str(repo), "--base", "main", "--head", "clean", "--consumer-namespace", "x"
    )
    assert usage.returncode == 2
    assert "go together" in usage.stderr
