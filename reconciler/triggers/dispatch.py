"""Verified webhooks to the registrations they concern: pushes fetch, pull requests are planned.

With shards, a push for another replica's registration stamps its shard's Lease, and a pull
request is planned where it arrives: the registrations another replica works on are resolved
here for that (``visitors``). Anyone may name any URL in a request that is not verified yet, so
for those only the webhook secret is read (and kept for a while, failures too), never the whole
connection with its kubeconfigs and credentials.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from klutch_gitops.config import RegistrationSpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import normalize_repo_url
from reconciler.ha.shards import ShardCoordinator
from reconciler.registrations import PLATFORM, Registrations
from reconciler.review.pulls import Reviewer
from reconciler.sync.connection import Connection, Resolver
from reconciler.triggers.webhook_events import PullRequestEvent, PushEvent

log = logging.getLogger(__name__)

VISITOR_SECRET_SECONDS = 60.0  # another replica's webhook secret is read again after this


class WebhookDispatch:
    def __init__(
        self,
        registrations: Registrations,
        resolver: Resolver,
        shards: ShardCoordinator | None,
        work_dir: Path,
    ) -> None:
        self.registrations = registrations
        self.resolver = resolver
        self.shards = shards
        self.visitors: dict[str, Connection] = {}  # other replicas' registrations, for webhooks
        # other replicas' webhook secrets: registration -> (spec, until, secrets)
        self.visitor_secrets: dict[str, tuple[RegistrationSpec, float, tuple[bytes, ...]]] = {}
        self.reviewer = Reviewer(self.connections, work_dir)

    def on_push(self, event: PushEvent) -> int:
        """A verified push: fetch the registrations whose own secret verified it and that follow
        its branch, or stamp the Lease of their shard for the replica that holds it."""
        triggered = 0
        registrations = self.registrations
        platform = registrations.platform
        if PLATFORM in event.registrations and platform and platform.spec.branch == event.branch:
            registrations.source_changed(PLATFORM)
            triggered += 1
        for name in sorted(event.registrations - {PLATFORM}):
            spec = registrations.spec_of(name)
            if spec is None or spec.branch != event.branch:
                continue
            sync = registrations.sync_of(name)
            if sync is not None:
                sync.trigger_fetch()
            elif self.shards is not None and not self.shards.owns(name):
                self.shards.request_fetch(self.shards.shard(name), name)
            else:
                continue  # suspended, or not registered (an error is reported for it)
            triggered += 1
        return triggered

    def on_pull_request(self, event: PullRequestEvent) -> int:
        self._visit(event.registrations)
        return self.reviewer.submit(event)

    def connections(self) -> dict[str, Connection]:
        """The registrations this replica works on, and those it resolved for a webhook that
        are still registered as they were."""
        records = list(self.registrations.records.values())
        ours = {r.name: r.sync.connection for r in records if r.sync is not None}
        specs = {r.name: r.spec for r in records}
        for name, connection in list(self.visitors.items()):
            if name in ours or specs.get(name) != connection.spec:
                self.visitors.pop(name, None)  # ours now, or changed: resolved again if needed
        return {**self.visitors, **ours}

    def webhook_candidates(self, urls: frozenset[str]) -> list[tuple[str, bytes]]:
        """(registration, webhook secret) for every registration of ``urls`` that has one."""
        records = list(self.registrations.records.values())
        specs = {r.name: r.spec for r in records if r.spec is not None}
        for stale in set(self.visitor_secrets) - set(specs):
            self.visitor_secrets.pop(stale, None)
        pairs = self._platform_candidates(urls)
        for name, spec in specs.items():
            if spec.suspend or spec.webhook_secret is None:
                continue
            if normalize_repo_url(spec.url) not in urls:
                continue
            sync = self.registrations.sync_of(name)
            if sync is not None:
                secrets = sync.connection.webhook_secrets
            elif self.shards is not None and not self.shards.owns(name):
                secrets = self._visitor_secrets(name, spec)
            else:
                continue  # not registered (an error is reported for it)
            pairs.extend((name, secret) for secret in secrets)
        return pairs

    def _platform_candidates(self, urls: frozenset[str]) -> list[tuple[str, bytes]]:
        """The platform repository's webhook secret when ``urls`` name it: on the leader only,
        which alone syncs it."""
        platform = self.registrations.platform
        if platform is None or normalize_repo_url(platform.spec.url) not in urls:
            return []
        return [(PLATFORM, secret) for secret in self.registrations.platform_webhook_secrets]

    def _visitor_secrets(self, name: str, spec: RegistrationSpec) -> tuple[bytes, ...]:
        """The webhook secret of another replica's registration, read at most once a while."""
        now = time.monotonic()
        cached = self.visitor_secrets.get(name)
        if cached is not None and cached[0] == spec and cached[1] > now:
            return cached[2]
        assert spec.webhook_secret is not None
        try:
            secrets: tuple[bytes, ...] = (
                self.resolver.value(
                    spec.webhook_secret,
                    f"repository {name}: webhook secret",
                    spec.consumer_namespace,
                ),
            )
        except KlutchError as error:
            log.info(
                "webhook for a registration whose secret cannot be read",
                extra={"repository": name, "error": error.message},
            )
            secrets = ()
        self.visitor_secrets[name] = (spec, now + VISITOR_SECRET_SECONDS, secrets)
        return secrets

    def _visit(self, names: frozenset[str]) -> None:
        """With shards, resolve the registrations among ``names`` (those a request verified for)
        that another replica works on, so this one can plan their pull requests."""
        if self.shards is None:
            return
        for name in sorted(names):
            spec = self.registrations.spec_of(name)
            if spec is None or self.registrations.sync_of(name) is not None or spec.suspend:
                continue
            visitor = self.visitors.get(name)
            if visitor is not None and visitor.spec == spec:
                continue
            try:
                self.visitors[name] = self.resolver.connection(spec)
            except KlutchError as error:
                log.info(
                    "webhook for a registration that cannot be resolved",
                    extra={"repository": name, "error": error.message},
                )
