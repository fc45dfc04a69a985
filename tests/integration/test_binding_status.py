"""A RepositoryBinding's status in kstatus' shape, end to end: Ready, Reconciling, Stalled with
reasons, the commits and counts the CRD declares, observedGeneration, and no write when a pass
finds nothing new."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.conditions import by_type
from reconciler.manager import Reconciler
from tests.env import Env
from tests.kit.claims import claim
from tests.kit.git import git
from tests.kit.tenant import repository_binding
from tests.kit.wait import eventually

from .test_reconciler_modes import bare_repo, kubeconfig_secret, push, start

SECRETS = Resource("", "v1", "secrets", "Secret")


@dataclass
class Bound:
    """A RepositoryBinding followed by a running reconciler, and a person's clone of its
    repository."""

    admin: Kube
    consumer: str
    namespace: str  # the App namespace
    remote: Path
    clone: Path
    reconciler: Reconciler
    generation: int
    mapped: str  # the App namespace's on the Control Plane

    def annotate(self, key: str, value: str | None) -> None:
        """What ``kubectl annotate`` does: a merge patch of one annotation (None removes it)."""
        patch = {"metadata": {"annotations": {key: value}}}
        self.admin.patch(REPOSITORY_BINDINGS, self.consumer, "team", patch)

    def conditions(self) -> dict[str, str]:
        """The live conditions as {type: "Status/Reason"}."""
        found = by_type(self.live().get("status"))
        return {kind: f"{c['status']}/{c['reason']}" for kind, c in found.items()}

    @property
    def registration(self) -> str:
        return f"{self.consumer}.team"

    def live(self) -> dict:
        found = self.admin.get(REPOSITORY_BINDINGS, self.consumer, "team")
        assert found is not None
        return found

    def settled(self, ready: str) -> dict:
        """The live binding once its status describes the branch's head with Ready=``ready``
        (the bot's status commits move the head until they are done)."""
        live = self.live()
        status = live.get("status") or {}
        head = git(self.remote, "rev-parse", "main")
        applied = status.get("lastAppliedCommit") == status.get("lastFetchedCommit") == head
        found = {kind: c["status"] for kind, c in by_type(status).items()}
        assert applied, f"head {head}, status {status}"
        assert (found.get("Ready"), found.get("Reconciling")) == (ready, "False"), status
        return live

    def assert_quiet(self) -> dict:
        """Three passes that find nothing new write nothing: the object and Ready's time stay.
        The live binding after them."""
        time.sleep(2)  # the bot's last status commit, if any, is fetched and passed over
        before = self.live()
        for _ in range(3):
            time.sleep(1.1)  # a rewrite would carry another second
            self.reconciler.queue.add(("sync", self.registration))
        time.sleep(1.5)
        after = self.live()
        moved = {
            key: (before["status"].get(key), value)
            for key, value in after["status"].items()
            if before["status"].get(key) != value
        }
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], moved
        ready_time = by_type(after["status"])["Ready"]["lastTransitionTime"]
        assert ready_time == by_type(before["status"])["Ready"]["lastTransitionTime"]
        return after


def bound(env: Env, files: dict[str, Callable[[str], str]], **config: Any) -> Bound:
    """A consumer, a repository holding ``files`` (each made for the App namespace) and a
    RepositoryBinding of it; ``config`` overrides the reconciler's settings (pollInterval...)."""
    tenant = env.tenant(start=False)  # a bound consumer
    remote, clone = bare_repo(env.tmp_path, "status", env.git_server.root)
    admin, consumer = tenant.control_plane, tenant.consumer
    app_kubeconfig = Path(env.stack.clusters["app"].kubeconfig).read_text()
    binder = tenant.config.repositories[0].control_plane_kubeconfig.file
    assert binder is not None
    admin.create(SECRETS, kubeconfig_secret("app-cluster", consumer, app_kubeconfig))
    admin.create(SECRETS, kubeconfig_secret("binder", consumer, binder.read_text()))
    push(clone, {name: text(tenant.namespace) for name, text in files.items()}, "claims")
    reconciler = start(
        replace(tenant.config, repositories=(), work_dir=env.tmp_path / "status-work", **config),
        env.cleanup,
    )
    created = admin.create(
        REPOSITORY_BINDINGS,
        repository_binding(consumer, "team", env.git_server.url_of(remote), tenant.namespace),
    )
    env.cleanup.append(lambda: admin.delete(REPOSITORY_BINDINGS, consumer, "team"))
    generation = created["metadata"]["generation"]
    return Bound(
        admin, consumer, tenant.namespace, remote, clone, reconciler, generation, tenant.mapped
    )


def test_a_synced_binding_reports_and_then_writes_nothing_new(env: Env) -> None:
    files = {"claims/good.yaml": lambda namespace: claim("good", namespace)}
    binding = bound(env, files)
    live = eventually(lambda: binding.settled("True"), "Ready=True with the head applied", 60)
    status = live["status"]
    found = by_type(status)
    assert found["Ready"]["reason"] == "Synced"
    assert (found["Stalled"]["status"], found["SecretValid"]["status"]) == ("False", "True")
    assert found["KonnectorConflict"]["status"] == "False"
    assert (found["Fetched"]["status"], found["Applied"]["status"]) == ("True", "True")
    assert found["Fetched"]["message"] == f"fetched {status['lastFetchedCommit'][:12]}"
    assert (status["claims"], status["rejected"]) == (1, 0)
    assert status["observedGeneration"] == binding.generation
    assert {c["observedGeneration"] for c in status["conditions"]} == {binding.generation}

    binding.assert_quiet()


def test_refused_documents_stall_the_binding_until_fixed(env: Env) -> None:
    files = {
        "claims/good.yaml": lambda namespace: claim("good", namespace),
        "claims/bad.yaml": lambda _namespace: claim("bad", "not-ours"),  # may not write there
    }
    binding = bound(env, files)
    live = eventually(lambda: binding.settled("False"), "Ready=False for the refused document", 60)
    status = live["status"]
    found = by_type(status)
    assert found["Ready"]["reason"] == "DocumentsRefused"
    assert (found["Stalled"]["status"], found["Stalled"]["reason"]) == ("True", "DocumentsRefused")
    assert found["SecretValid"]["status"] == "True"
    assert (status["claims"], status["rejected"]) == (1, 1)
    assert status["refusals"][0]["file"] == "claims/bad.yaml"
    assert status["observedGeneration"] == binding.generation
    assert {c["observedGeneration"] for c in status["conditions"]} == {binding.generation}

    after = binding.assert_quiet()
    ready_time = by_type(after["status"])["Ready"]["lastTransitionTime"]
    assert ready_time == found["Ready"]["lastTransitionTime"]

    push(binding.clone, {"claims/bad.yaml": claim("bad", binding.namespace)}, "fix the namespace")
    live = eventually(lambda: binding.settled("True"), "Ready=True once the document is fixed", 60)
    status = live["status"]
    found = by_type(status)
    assert found["Stalled"]["status"] == "False"
    assert (status["claims"], status["rejected"]) == (2, 0)
    assert "refusals" not in status
    assert found["Ready"]["lastTransitionTime"] >= ready_time


def test_a_refused_push_stalls_a_ready_binding_naming_the_document(env: Env) -> None:
    files = {"claims/good.yaml": lambda namespace: claim("good", namespace)}
    binding = bound(env, files)
    eventually(lambda: binding.settled("True"), "Ready=True with the head applied", 60)

    pushed = push(binding.clone, {"claims/bad.yaml": claim("bad", "not-ours")}, "a bad claim")
    live = eventually(lambda: binding.settled("False"), "Ready=False for the pushed document", 60)
    found = by_type(live["status"])
    assert git(binding.remote, "merge-base", "--is-ancestor", pushed, "main") == ""
    assert (found["Ready"]["reason"], found["Stalled"]["status"]) == ("DocumentsRefused", "True")
    assert "the first: claims/bad.yaml#0" in found["Ready"]["message"]  # file and document
    assert found["Stalled"]["message"] == found["Ready"]["message"]
    assert found["Applied"]["status"] == "True"  # the good claim is applied: the loader refused
    assert live["status"]["refusals"][0]["file"] == "claims/bad.yaml"
