"""A tenant steers its RepositoryBinding with annotations, end to end on the real stack: a new
``requestedAt`` value fetches and applies at once and is answered in ``lastHandledReconcileAt``;
``suspend`` stops every change until it is lifted, and the status says so."""

from __future__ import annotations

import subprocess
import sys
import time

from klutch_gitops.apis import REQUESTED_AT_ANNOTATION, SUSPEND_ANNOTATION
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.wait import eventually

from .test_binding_status import Bound, bound
from .test_reconciler_modes import push

QUIET = 4.0  # seconds in which nothing may happen: several one-second polls


def first_claim(namespace: str) -> str:
    return claim("first", namespace)


def mirrored(binding: Bound, name: str) -> bool:
    return binding.admin.get(POSTGRES, binding.mapped, name) is not None


def test_a_reconcile_request_applies_a_commit_nothing_else_would_fetch(env: Env) -> None:
    # Polls once an hour and no webhook: after the first fetch only the request fetches again.
    files = {"claims/first.yaml": first_claim}
    binding = bound(env, files, poll_interval=3600.0)
    eventually(lambda: mirrored(binding, "first"), "the first claim mirrored", 60)
    eventually(lambda: binding.conditions().get("Ready") == "True/Synced", "Ready", 60)
    # The registration's first pass fetches on its own, and the poller's first answer asks for
    # one more fetch when it comes after that pass: a push before that fetch would be applied.
    # Only once that pass is over is the hour's wait a promise.
    name = f"{binding.consumer}.team"
    poller, syncs = binding.reconciler.registrations.poller, binding.reconciler.syncs
    eventually(lambda: poller.answered(name) and not syncs[name].needs_fetch, "the first poll", 30)
    with syncs[name]._lock:  # the pass that took that fetch is over
        pass

    push(binding.clone, {"claims/second.yaml": claim("second", binding.namespace)}, "second")
    time.sleep(QUIET)
    assert not mirrored(binding, "second")  # nothing fetched it

    # Flux's contract (fluxcd/pkg runtime/predicates/reconcile_requested.go and apis/meta
    # annotations.go): any new value asks for a reconcile, the status echoes the value handled.
    asked = time.monotonic()
    binding.annotate(REQUESTED_AT_ANNOTATION, "2026-11-24T23:00:00Z")
    status = eventually(
        lambda: (
            (s := binding.live().get("status") or {}).get("lastHandledReconcileAt")
            == "2026-11-24T23:00:00Z"
            and s
        ),
        "the request answered",
        30,
    )
    answered = time.monotonic() - asked
    assert mirrored(binding, "second")  # the pass that answered applied the new commit
    assert status["claims"] == 2
    print(f"requestedAt answered after {answered:.2f}s")  # a figure for the log, not asserted

    binding.assert_quiet()  # the same value again asks for nothing more
    assert binding.live()["status"]["lastHandledReconcileAt"] == "2026-11-24T23:00:00Z"


def test_a_suspended_binding_applies_nothing_until_resumed(env: Env) -> None:
    files = {"claims/first.yaml": first_claim}
    binding = bound(env, files)  # one-second polls
    eventually(lambda: binding.conditions().get("Ready") == "True/Synced", "Ready", 60)

    binding.annotate(SUSPEND_ANNOTATION, "true")
    eventually(
        lambda: binding.conditions().get("Ready") == "Unknown/Suspended", "Ready=Suspended", 30
    )
    found = binding.conditions()
    assert (found["Reconciling"], found["Stalled"]) == ("False/Suspended", "False/NotStalled")
    ready = binding.live()["status"]["conditions"]
    message = next(c["message"] for c in ready if c["type"] == "Ready")
    assert f"klutch-gitops resume {binding.consumer}/team" in message
    assert binding.live()["status"]["claims"] == 1  # the last pass's figures stay

    push(binding.clone, {"claims/second.yaml": claim("second", binding.namespace)}, "second")
    time.sleep(QUIET)
    assert not mirrored(binding, "second")
    assert binding.conditions()["Ready"] == "Unknown/Suspended"

    binding.annotate(SUSPEND_ANNOTATION, None)  # resume: what changed meanwhile is applied
    eventually(lambda: mirrored(binding, "second"), "the change made while suspended", 60)
    eventually(lambda: binding.conditions().get("Ready") == "True/Synced", "Ready again", 60)


def klutch_gitops(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed CLI's entry point, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "klutch_gitops.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_reconciles_suspends_and_resumes(env: Env) -> None:
    files = {"claims/first.yaml": first_claim}
    binding = bound(env, files, poll_interval=3600.0)
    eventually(lambda: binding.conditions().get("Ready") == "True/Synced", "Ready", 60)
    where = (
        f"{binding.consumer}/team",
        "--kubeconfig",
        env.stack.clusters["control-plane"].kubeconfig,
    )

    push(binding.clone, {"claims/second.yaml": claim("second", binding.namespace)}, "second")
    asked = time.monotonic()
    done = klutch_gitops("reconcile", *where, "--timeout", "30")
    assert done.returncode == 0, done.stderr
    print(f"klutch-gitops reconcile returned after {time.monotonic() - asked:.2f}s")  # not asserted
    assert mirrored(binding, "second")  # it waited for the pass that applied the new commit
    assert "True" in done.stdout + done.stderr

    assert klutch_gitops("suspend", *where).returncode == 0
    eventually(lambda: binding.conditions().get("Ready") == "Unknown/Suspended", "suspended", 30)
    refused = klutch_gitops("reconcile", *where, "--timeout", "5")  # as `flux reconcile` refuses
    assert refused.returncode == 1
    assert "suspended" in refused.stderr
    assert "Traceback" not in refused.stderr
    push(binding.clone, {"claims/third.yaml": claim("third", binding.namespace)}, "third")
    time.sleep(QUIET)
    assert not mirrored(binding, "third")

    resumed = klutch_gitops("resume", *where, "--timeout", "30")
    assert resumed.returncode == 0, resumed.stderr
    assert mirrored(binding, "third")  # resume waited for the pass that applied it
    assert binding.conditions()["Ready"] == "True/Synced"
