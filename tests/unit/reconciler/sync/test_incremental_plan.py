"""Planning only what changed (reconciler/sync/unchanged.py) writes exactly what planning every
claim writes: two in-memory clusters driven by the same random events, one reconciled with the
remembered verdicts and one without, must see the same writes, Events and objects each pass."""

from __future__ import annotations

import random

import pytest

from klutch_gitops.kube.client import KubeError
from reconciler.manifests import Claim, Identity, Location
from reconciler.sync.apply import Source, apply_claims
from reconciler.sync.desired import DesiredState
from reconciler.sync.observe import observe
from reconciler.sync.unchanged import InSync, Quiet
from tests.unit.reconciler.sync.fakeview import FakeView, Key
from tests.unit.reconciler.sync.test_sync_stages import APP_NS, CP_NS, EXPORT, GROUP, KIND, REPO

SOURCE = Source(REPO, "claims", "c1", external=False)
NAMES = ("db0", "db1", "db2", "db3")


class VersionedView(FakeView):
    """A FakeView whose every write gives the object a new resourceVersion, as an apiserver."""

    def __init__(self) -> None:
        super().__init__([EXPORT], REPO)
        self.mapping[APP_NS] = CP_NS
        self.synced_secrets.add(CP_NS)
        self.version = 0

    def bump(self, store: dict[Key, dict], key: Key) -> None:
        self.version += 1
        store[key]["metadata"]["resourceVersion"] = str(self.version)

    def _apply(self, store: dict[Key, dict], cluster: str, body: dict, verb: str = "apply") -> dict:
        out = super()._apply(store, cluster, body, verb)
        meta = body["metadata"]
        self.bump(store, (body["kind"], meta.get("namespace", ""), meta["name"]))
        return out


def unversioned(view: VersionedView) -> list[dict]:
    """Both clusters' objects without their resourceVersions."""
    return [
        {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}
        for store in (view.app, view.cp)
        for _, obj in sorted(store.items())
    ]


def claim(name: str, plan: str) -> Claim:
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": KIND,
        "metadata": {"name": name, "namespace": APP_NS},
        "spec": {"plan": plan, "writeConnectionSecretToRef": {"name": f"{name}-conn"}},
    }
    return Claim(Identity.of(body), f"{GROUP}/v1", body, Location(f"claims/{name}.yaml", 0))


def event(views: list[VersionedView], claims: dict[str, Claim], rng: random.Random) -> None:
    """One thing that happens between passes, to both views alike."""
    name = rng.choice(NAMES)
    what = rng.choice(("push", "drift-app", "drift-cp", "status", "secret", "refuse", "none"))
    phase = rng.choice(("Ready", "Busy"))
    if what == "push":
        claims[name] = claim(name, rng.choice(("nano", "small", "big")))
    for view in views:
        app, cp = (KIND, APP_NS, name), (KIND, CP_NS, name)
        if what == "drift-app" and app in view.app:
            view.app[app]["spec"] = {"plan": "kubectl-edit"}
            view.bump(view.app, app)
        elif what == "drift-cp" and cp in view.cp:
            view.cp[cp]["spec"] = {"plan": "drifted"}
            view.bump(view.cp, cp)
        elif what == "status" and cp in view.cp:
            view.cp[cp]["status"] = {"phase": phase}
            view.bump(view.cp, cp)
        elif what == "secret":
            secret = ("Secret", CP_NS, f"{name}-conn")
            meta = {"name": f"{name}-conn", "namespace": CP_NS}
            view.cp[secret] = {"kind": "Secret", "metadata": meta, "data": {"pw": name}}
            view.bump(view.cp, secret)
        elif what == "refuse":
            view.refuse[("apply", "cp", name)] = KubeError(422, "no", "Invalid")


def one_pass(view: VersionedView, claims: tuple[Claim, ...], memo: tuple[InSync, Quiet] | None):
    planned = memo[0].to_plan(view, claims, SOURCE, ("v1",)) if memo else claims
    problems = apply_claims(view, planned, SOURCE)
    quiet = memo[1].under(("v1",)) if memo else None
    desired = DesiredState(claims, ())
    return observe(view, desired, claims, REPO, tuple(problems), (), quiet), problems


@pytest.mark.parametrize("seed", range(6))
def test_remembered_verdicts_write_what_planning_everything_writes(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - a reproducible sequence, not a secret
    plain, memoised = VersionedView(), VersionedView()
    memo = (InSync(), Quiet())
    claims = {name: claim(name, "nano") for name in NAMES}
    skipped = 0
    for _ in range(60):
        for _ in range(rng.randint(0, 2)):
            event([plain, memoised], claims, rng)
        current = tuple(claims.values())
        assert one_pass(memoised, current, memo) == one_pass(plain, current, None)
        assert sorted(memoised.writes) == sorted(plain.writes)  # the apply's pools interleave
        assert unversioned(memoised) == unversioned(plain)  # numbered in the pools' order
        assert sorted(memoised.events) == sorted(plain.events)
        assert sorted(memoised.normal_events) == sorted(plain.normal_events)
        skipped += memo[0].skipped + memo[1].skipped
    assert skipped > 0  # the memos were used, not only filled
    print(f"seed {seed}: {skipped} claim plans or mirrorings skipped in 60 passes")


def test_an_unchanged_pass_plans_nothing_and_a_new_version_plans_its_claim() -> None:
    view, in_sync = VersionedView(), InSync()
    claims = tuple(claim(name, "nano") for name in NAMES)
    apply_claims(view, in_sync.to_plan(view, claims, SOURCE, ("v1",)), SOURCE)
    # the writes gave new versions: the apply plans them (in sync); unmoved, they are planned
    # once more here and remembered; from then on nothing is planned
    assert len(in_sync.to_plan(view, claims, SOURCE, ("v1",))) == len(NAMES)
    for _ in range(2):
        assert in_sync.to_plan(view, claims, SOURCE, ("v1",)) == ()
        assert in_sync.skipped == len(NAMES)
    view.cp[(KIND, CP_NS, "db2")]["spec"] = {"plan": "drifted"}
    view.bump(view.cp, (KIND, CP_NS, "db2"))
    assert [c.identity.name for c in in_sync.to_plan(view, claims, SOURCE, ("v1",))] == ["db2"]
    assert len(in_sync.to_plan(view, claims, SOURCE, ("v2",))) == len(NAMES)  # new exports
