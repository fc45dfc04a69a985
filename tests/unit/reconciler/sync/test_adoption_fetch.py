"""When a pass fetches Git before adopting (reconciler/sync/adoption.py ``ahead_of_git`` and
``fetch_for``): an App object the tool applied from a commit newer than the Git view held, or one
of ours it deleted that the view still names; once per version of it; never for another
repository's or one outside the App namespaces."""

from __future__ import annotations

from reconciler.manifests import Claim, Export, Identity, Location
from reconciler.sync import objects
from reconciler.sync.adoption import ahead_of_git, fetch_for, live_claims
from tests.unit.reconciler.sync.fakeview import FakeView

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


def deleting(obj: dict) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-11-25T02:40:00Z"}}


def test_objects_nobody_claims_that_git_does_not_name_are_ahead_of_it() -> None:
    live = [
        body("pushed-just-now", version="7"),
        body("named-in-git"),
        body("adopted", **{objects.REPOSITORY_LABEL: REPO}),
        body("another-repositorys", **{objects.REPOSITORY_LABEL: "other-repo"}),
        body("elsewhere", namespace="not-registered"),
        deleting(body("someone-elses-going")),
    ]
    found = ahead_of_git(live, (claim("named-in-git"),), REPO, (APP_NS,))
    assert found == {Identity.of(body("pushed-just-now")): "7"}


def test_ours_being_deleted_while_git_still_names_it_is_ahead_of_it() -> None:
    """The tool pruned it from a commit the view has not seen: without a fetch, a held
    deletion-protected object would be taken for one whose claim is back in Git."""
    ours = {objects.REPOSITORY_LABEL: REPO}
    live = [
        deleting(body("pruned", version="9", **ours)),
        deleting(body("out-of-git-already", **ours)),
        deleting(body("another-repositorys", **{objects.REPOSITORY_LABEL: "other-repo"})),
    ]
    named = (claim("pruned"), claim("another-repositorys"))
    assert ahead_of_git(live, named, REPO, (APP_NS,)) == {Identity.of(body("pruned")): "9"}


def test_a_fetch_is_made_once_per_version_of_an_unnamed_object() -> None:
    first = ahead_of_git([body("stranger", version="1")], (), REPO, (APP_NS,))
    assert fetch_for(first, {})
    assert not fetch_for(first, first)  # the next informer event: no fetch again
    changed = ahead_of_git([body("stranger", version="2")], (), REPO, (APP_NS,))
    assert fetch_for(changed, first)  # the tool re-applied it: it may be named now
    assert not fetch_for({}, first)  # nothing is ahead any more


def test_a_new_unnamed_object_beside_a_known_one_fetches() -> None:
    known = ahead_of_git([body("stranger")], (), REPO, (APP_NS,))
    both = ahead_of_git([body("stranger"), body("new-claim")], (), REPO, (APP_NS,))
    assert fetch_for(both, known)


def test_live_claims_are_every_exported_kinds_app_objects() -> None:
    view = FakeView([Export(GROUP, KIND, "postgresqlinstances", schemas={"v1": {}})], REPO)
    view.put_app(body("a"))
    view.put_app(body("b"))
    assert sorted(obj["metadata"]["name"] for obj in live_claims(view)) == ["a", "b"]
