"""When a pass fetches Git before adopting (reconciler/sync/adoption.py ``unnamed`` and
``fetch_for``): an App object the tool applied from a commit newer than the Git view held, once
per version of it, never for ours, another repository's, or one outside the App namespaces."""

from __future__ import annotations

from klutch_gitops.manifests import Claim, Export, Identity, Location
from reconciler.sync import objects
from reconciler.sync.adoption import fetch_for, live_claims, unnamed
from tests.unit.fakeview import FakeView

REPO = "team-repo"
GROUP, KIND = "anynines.com", "PostgresqlInstance"
APP_NS = "team"


def body(name: str, namespace: str = APP_NS, version: str = "1", **labels: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": version,
            "labels": labels,
        },
        "spec": {"plan": "nano"},
    }


def claim(name: str) -> Claim:
    return Claim(Identity.of(body(name)), f"{GROUP}/v1", body(name), Location("c.yaml", 0), None)


def test_only_objects_nobody_claims_and_git_does_not_name_are_unnamed() -> None:
    live = [
        body("pushed-just-now", version="7"),
        body("named-in-git"),
        body("adopted", **{objects.REPOSITORY_LABEL: REPO}),
        body("another-repositorys", **{objects.REPOSITORY_LABEL: "other-repo"}),
        body("elsewhere", namespace="not-registered"),
        {**body("going"), "metadata": {**body("going")["metadata"], "deletionTimestamp": "t"}},
    ]
    found = unnamed(live, (claim("named-in-git"),), (APP_NS,))
    assert found == {Identity.of(body("pushed-just-now")): "7"}


def test_a_fetch_is_made_once_per_version_of_an_unnamed_object() -> None:
    first = unnamed([body("stranger", version="1")], (), (APP_NS,))
    assert fetch_for(first, {})
    assert not fetch_for(first, first)  # the next informer event: no fetch again
    changed = unnamed([body("stranger", version="2")], (), (APP_NS,))
    assert fetch_for(changed, first)  # the tool re-applied it: it may be named now
    assert not fetch_for({}, first)  # nothing unnamed is left


def test_a_new_unnamed_object_beside_a_known_one_fetches() -> None:
    known = unnamed([body("stranger")], (), (APP_NS,))
    both = unnamed([body("stranger"), body("new-claim")], (), (APP_NS,))
    assert fetch_for(both, known)


def test_live_claims_are_every_exported_kinds_app_objects() -> None:
    view = FakeView([Export(GROUP, KIND, "postgresqlinstances", schemas={"v1": {}})], REPO)
    view.put_app(body("a"))
    view.put_app(body("b"))
    assert sorted(obj["metadata"]["name"] for obj in live_claims(view)) == ["a", "b"]
