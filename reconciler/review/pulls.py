"""Pull-request review: plan a pull request's head against its base for every registration that
follows the base branch, and post the plan as one sticky comment and a commit status.

A webhook only queues the request (the newest event per registration and pull request wins);
review workers fetch the base branch and the pull request's head ref into a review clone of the
registration (never the clone the reconciler syncs from), run ``plan`` with the registration's own
credentials, and post with the registration's ``forgeToken`` to the forge API that its
registered URL names (``forges.repository_api``) — only for the registrations whose own webhook
secret verified the request. A plan that cannot be made (a merge conflict, an unreachable
Control Plane) is posted as such, with the reason and the fix; a forge that cannot be reached is
retried with back-off.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import KubeError
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from reconciler.git.checkout import Checkout
from reconciler.review.forges import FORGES, Forge, ForgeError, NoForgeAPI, State, repository_api
from reconciler.review.plan import Plan
from reconciler.review.plan_io import Target, run_plan
from reconciler.review.plan_render import MAX_COMMENT, render_markdown
from reconciler.sync.connection import Connection
from reconciler.triggers.webhook_events import PullRequestEvent

log = logging.getLogger(__name__)

Key = tuple[str, int]  # registration, pull request number


def marker(registration: str) -> str:
    """The hidden first line that makes a comment ours, per registration."""
    return f"<!-- klutch-gitops plan: {registration} -->"


def context(registration: str) -> str:
    """The commit status context, per registration (one repository may have several)."""
    return f"klutch-gitops/plan/{registration}"


def plan_comment(registration: str, plan: Plan) -> str:
    head = marker(registration) + "\n"
    return head + render_markdown(plan, limit=MAX_COMMENT - len(head))


def error_comment(registration: str, event: PullRequestEvent, sha: str, error: KlutchError) -> str:
    quoted = "\n".join(f"> {line}" for line in error.message[:2000].splitlines())
    return (
        f"{marker(registration)}\n## klutch-gitops plan: ⚠️ no plan\n\n"
        f"Merging `{event.head}` ({sha[:12]}) into `{event.base}` could not be "
        f"planned for `{registration}`:\n\n{quoted}\n\n"
        f"**Fix:** {error.fix or 'see the message'}\n"
    )


def status_of(plan: Plan) -> tuple[State, str]:
    """The commit status of a plan and its one-line description."""
    failures = plan.failures()
    if failures:
        plural = "s" * (len(failures) != 1)
        return State.FAILURE, f"{len(failures)} failure{plural}: {failures[0].subject}"
    counts = plan.counts()
    changes = ", ".join(f"{counts[a]} to {a}" for a in ("create", "change", "delete") if counts[a])
    return State.SUCCESS, f"clean: {changes or 'no changes to claims'}"


class Reviewer:
    """Queues pull requests and plans them on its own workers."""

    def __init__(
        self,
        registrations: Callable[[], Mapping[str, Connection]],
        work_dir: Path,
        workers: int = 2,
        transport: httpx.BaseTransport | None = None,
        api: Callable[[str, str, str | None], str] = repository_api,
    ) -> None:
        """``api``: the forge API URL of (provider, registered URL, project path); tests give
        their ``file://`` remotes a forge that ``transport`` plays."""
        self.registrations = registrations
        self._api = api
        self.work_dir = work_dir
        self.queue: WorkQueue[Key] = WorkQueue()
        self._pending: dict[Key, PullRequestEvent] = {}
        self._pending_lock = threading.Lock()
        self._clones: dict[str, threading.Lock] = {}
        self._workers = workers
        self._transport = transport
        self.threads: list[threading.Thread] = []

    def start(self) -> Reviewer:
        self.threads = run_workers(self.queue, self.handle, self._workers, "review")
        return self

    def stop(self, grace: float = 30.0) -> None:
        """Take no more work; let a review in flight finish for up to ``grace`` seconds."""
        self.queue.shutdown()
        for thread in self.threads:
            thread.join(timeout=grace)

    def submit(self, event: PullRequestEvent) -> int:
        """Queue the pull request for every registration that verified it, follows its base
        branch and may post (has a forgeToken); how many did."""
        queued = 0
        registrations = self.registrations()
        for name in sorted(event.registrations):
            connection = registrations.get(name)
            if connection is None or connection.spec.branch != event.base:
                continue
            if connection.forge_token is None:
                log.info(
                    "pull request not planned: the registration has no forgeToken",
                    extra={"repository": name, "pull_request": event.number},
                )
                continue
            try:
                self._api(event.provider, connection.spec.url, event.project_path)
            except NoForgeAPI as error:
                log.warning(
                    "pull request not planned: no forge API for the registered URL",
                    extra={"repository": name, "error": error.message},
                )
                continue
            with self._pending_lock:
                self._pending[(name, event.number)] = event
            self.queue.add((name, event.number))
            queued += 1
        return queued

    def handle(self, key: Key) -> None:
        with self._pending_lock:
            event = self._pending.pop(key, None)
        connection = self.registrations().get(key[0])
        if event is None or connection is None:
            return  # planned already with a newer event, or unregistered meanwhile
        try:
            with self._clones.setdefault(key[0], threading.Lock()):
                self.review(connection, event)
        except Exception:
            with self._pending_lock:  # retried with back-off, unless a newer event came
                self._pending.setdefault(key, event)
            raise

    def review(self, connection: Connection, event: PullRequestEvent) -> None:
        """Plan ``event`` for ``connection`` and post comment and status; forge errors raise.

        The commit marked is the pull request's head as fetched: when it moved on since the
        event, the newer head is planned (its own event plans it again, to the same result).
        """
        name = connection.spec.name
        assert connection.forge_token is not None
        api = self._api(event.provider, connection.spec.url, event.project_path)
        forge: Forge = FORGES[event.provider](api, connection.forge_token, self._transport)
        sha = event.head_sha
        try:
            clone = Checkout.open_or_clone(
                connection.spec.url,
                connection.spec.branch,
                self.work_dir / name / "review",
                connection.credentials,
            )
            sha = clone.fetch_ref(event.head_ref)
            forge.post_status(sha, State.PENDING, context(name), "planning the merge…", None)
            plan = run_plan(clone.root, connection.spec.branch, sha, [self._target(connection)])
        except ForgeError:
            raise
        except (KlutchError, KubeError) as error:
            problem = error if isinstance(error, KlutchError) else KlutchError(str(error))
            body, state = error_comment(name, event, sha, problem), State.ERROR
            description = f"no plan: {problem.message}"
            log.warning(
                "pull request could not be planned",
                extra={"repository": name, "pull_request": event.number, "error": str(error)},
            )
        else:
            plan = dataclasses.replace(plan, head_ref=event.head)
            body = plan_comment(name, plan)
            state, description = status_of(plan)
        comment = forge.upsert_comment(event.number, marker(name), body)
        forge.post_status(sha, state, context(name), description, comment.url)
        log.info(
            "pull request planned",
            extra={"repository": name, "pull_request": event.number, "state": state.value},
        )

    @staticmethod
    def _target(connection: Connection) -> Target:
        spec = connection.spec
        return Target(
            name=spec.name,
            path=spec.path,
            consumer_namespace=spec.consumer_namespace,
            app_namespaces=frozenset(spec.app_namespaces),
            control_plane=connection.control_plane,
            app=connection.app,
        )
