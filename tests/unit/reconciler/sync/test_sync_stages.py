"""The stages of a sync pass, each against an in-memory view of the two clusters (FakeView)."""

from __future__ import annotations

import base64

import yaml

from klutch_gitops.kube.client import KubeError
from reconciler.manifests import Claim, Export, Identity, Location, Rejection
from reconciler.sync import konnector, objects
from reconciler.sync.adoption import adopt
from reconciler.sync.apply import Source, apply_claims
from reconciler.sync.desired import DesiredState
from reconciler.sync.kinds import serve_exported_kinds
from reconciler.sync.namespaces import map_namespaces
from reconciler.sync.observe import observe
from reconciler.sync.outcome import Failed, Foreign
from reconciler.sync.prune import finalize, prune
from reconciler.sync.writeback import Mode, ObservedStatus, Schedule
from tests.unit.reconciler.sync.fakeview import FakeView

REPO = "team-repo"
GROUP, KIND, PLURAL = "anynines.com", "PostgresqlInstance", "postgresqlinstances"
EXPORT = Export(GROUP, KIND, PLURAL, schemas={"v1": {}})
APP_NS, CP_NS = "team", "kube-bind-abc-team"
SOURCE = Source(REPO, "claims", "c1", external=False)


def claim(name: str = "db", plan: str = "nano", status: dict | None = None) -> Claim:
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": KIND,
        "metadata": {"name": name, "namespace": APP_NS},
        "spec": {"plan": plan},
    }
    return Claim(Identity.of(body), f"{GROUP}/v1", body, Location(f"claims/{name}.yaml", 0), status)


def mapped_view() -> FakeView:
    view = FakeView([EXPORT], REPO)
    view.mapping[APP_NS] = CP_NS
    return view


def ours(name: str, **meta: object) -> dict:
    """An App object of this repository, as an earlier pass applied it."""
    body = objects.app_object(claim(name), REPO, "claims", "c0", None)
    body["metadata"].update(meta)
    return body


# -- App CRDs from exports ---------------------------------------------------------------


def raw_export() -> dict:
    return {
        "metadata": {"name": EXPORT.name, "resourceVersion": "1"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "plural": PLURAL},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }


def test_an_exported_kind_is_served_and_watched() -> None:
    view = FakeView([EXPORT])
    verdicts, problems = serve_exported_kinds(view, [raw_export()], "claims", "consumer")
    assert problems == []
    assert ("apply", "app", "CustomResourceDefinition", "", EXPORT.name) in view.writes
    assert view.crds[EXPORT.name]["spec"]["group"] == GROUP
    assert view.watched == [EXPORT.name, "apiservicebindings"]
    assert verdicts[EXPORT.name].state is konnector.State.NONE


def test_a_foreign_crd_is_left_alone_and_reported() -> None:
    view = FakeView([EXPORT])
    view.crds[EXPORT.name] = {"metadata": {"name": EXPORT.name, "labels": {}}}
    _, problems = serve_exported_kinds(view, [raw_export()], "claims", "consumer")
    assert view.writes == []
    assert [p.file for p in problems] == ["claims"]
    assert "not managed by klutch-gitops" in problems[0].message


def test_a_konnector_for_another_consumer_namespace_is_a_conflict() -> None:
    view = FakeView([EXPORT])
    ref = {"namespace": "klutch-bind", "name": "kubeconfig", "key": "kubeconfig"}
    view.service_bindings[EXPORT.name] = {
        "metadata": {"name": EXPORT.name, "uid": "u1"},
        "spec": {"kubeconfigSecretRef": ref},
    }
    kubeconfig = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "cp", "namespace": "someone-else"}}],
    }
    view.put_app(
        {
            "kind": "Secret",
            "metadata": {"namespace": "klutch-bind", "name": "kubeconfig"},
            "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
        }
    )
    verdicts, _ = serve_exported_kinds(view, [raw_export()], "claims", "consumer")
    assert verdicts[EXPORT.name].conflict
    assert "someone-else" in verdicts[EXPORT.name].message


# -- namespace mapping -------------------------------------------------------------------


def test_an_unmapped_namespace_is_requested_and_stays_pending() -> None:
    view = FakeView([EXPORT])
    assert map_namespaces(view, (APP_NS,)) is True
    assert view.writes == [("apply", "cp", "APIServiceNamespace", "consumer", APP_NS)]
    assert view.mapping == {}
    assert map_namespaces(view, (APP_NS,)) is True  # asked once; the status has no namespace yet
    assert len(view.writes) == 1


def test_a_mapped_namespace_is_recorded_and_its_claims_watched() -> None:
    view = FakeView([EXPORT])
    view.namespace_mappings[APP_NS] = {"status": {"namespace": CP_NS}}
    assert map_namespaces(view, (APP_NS,)) is False
    assert view.mapping == {APP_NS: CP_NS}
    assert "mapped claims" in view.watched


# -- adoption (external mode) ------------------------------------------------------------


def tool_applied(name: str, **labels: str) -> dict:
    obj = dict(claim(name).body)
    obj["metadata"] = {**obj["metadata"], "uid": f"uid-{name}", "labels": labels}
    return obj


def test_adoption_mirrors_what_git_names_and_what_carries_our_label() -> None:
    view = mapped_view()
    view.put_app(tool_applied("named"))
    view.put_app(tool_applied("adopted", **{objects.REPOSITORY_LABEL: REPO}))
    view.put_app(tool_applied("stranger"))
    mirrored, problems = adopt(view, (claim("named"),), REPO, (APP_NS,), "claims")
    assert [c.identity.name for c in mirrored] == ["adopted", "named"]
    assert mirrored[1].location == claim("named").location
    assert problems == []


def test_adoption_refuses_what_another_repository_owns() -> None:
    view = mapped_view()
    view.put_app(tool_applied("db", **{objects.REPOSITORY_LABEL: "other-repo"}))
    mirrored, problems = adopt(view, (claim("db"),), REPO, (APP_NS,), "claims")
    assert mirrored == ()
    assert [p.file for p in problems] == ["claims/db.yaml"]
    assert "belongs to repository other-repo" in problems[0].message


# -- a konnector for another consumer namespace ------------------------------------------


def test_a_foreign_konnector_refuses_its_kinds() -> None:
    other = Claim(
        Identity("example.com", "Thing", APP_NS, "t"), "example.com/v1", {}, Location("t.yaml", 0)
    )
    conflict = konnector.Verdict(konnector.State.FOREIGN, "someone else's", "re-register")
    kept, problems = konnector.refuse_foreign(
        (claim("db"), other),
        (claim("db"), other),
        {EXPORT.name: conflict},
        lambda c: EXPORT.name if c.identity.kind == KIND else "things.example.com",
    )
    assert kept == (other,)
    assert [(p.file, p.identity, p.fix) for p in problems] == [
        ("claims/db.yaml", claim("db").identity, "re-register")
    ]


# -- apply -------------------------------------------------------------------------------


def test_apply_writes_the_app_copy_and_the_control_plane_copy() -> None:
    view = mapped_view()
    assert apply_claims(view, (claim("db"),), SOURCE) == []
    app = view.app[(KIND, APP_NS, "db")]
    assert app["metadata"]["labels"][objects.REPOSITORY_LABEL] == REPO
    assert app["metadata"]["annotations"][objects.FILE_ANNOTATION] == "claims/db.yaml"
    assert app["metadata"]["finalizers"] == [objects.FINALIZER]
    cp = view.cp[(KIND, CP_NS, "db")]
    assert cp["metadata"]["namespace"] == CP_NS
    assert objects.REPOSITORY_LABEL not in (cp["metadata"].get("labels") or {})
    assert cp["spec"] == {"plan": "nano"}
    assert [e[:2] for e in view.normal_events] == [("db", "Synced")]  # told: the copy is there


def test_apply_writes_nothing_when_both_copies_are_in_sync() -> None:
    view = mapped_view()
    apply_claims(view, (claim("db"),), SOURCE)
    view.writes.clear()
    assert apply_claims(view, (claim("db"),), SOURCE) == []
    assert view.writes == []
    assert len(view.normal_events) == 1  # nothing applied, nothing told


def test_deletion_protection_reaches_the_control_plane_copy_and_leaves_it() -> None:
    # the bind API reads it there to refuse an unforced unbind (bind_api/unbinding.py)
    view = mapped_view()
    apply_claims(view, (claim("db"),), SOURCE)
    live = view.app[(KIND, APP_NS, "db")]
    live["metadata"]["annotations"][objects.DELETION_PROTECTION] = "true"  # kubectl annotate
    apply_claims(view, (claim("db"),), SOURCE)
    cp = view.cp[(KIND, CP_NS, "db")]
    assert cp["metadata"]["annotations"][objects.DELETION_PROTECTION] == "true"
    del live["metadata"]["annotations"][objects.DELETION_PROTECTION]
    apply_claims(view, (claim("db"),), SOURCE)
    cp = view.cp[(KIND, CP_NS, "db")]
    assert objects.DELETION_PROTECTION not in cp["metadata"]["annotations"]


def test_a_refused_control_plane_apply_names_its_claim() -> None:
    view = mapped_view()
    view.refuse[("apply", "cp", "db")] = KubeError(422, "Invalid", "spec.plan: Unsupported")
    [problem] = apply_claims(view, (claim("db"),), SOURCE)
    assert problem.identity == claim("db").identity  # so observe can put it on the claim
    assert "Control Plane refused" in problem.message
    assert view.normal_events == []


def test_apply_without_a_mapping_writes_only_the_app_copy() -> None:
    view = FakeView([EXPORT])
    apply_claims(view, (claim("db"),), SOURCE)
    assert [w[:2] for w in view.writes] == [("apply", "app")]


def test_a_refused_app_apply_is_a_problem_and_an_event() -> None:
    view = mapped_view()
    view.put_app(ours("db"))
    view.refuse[("apply", "app", "db")] = KubeError(409, "Conflict", "argocd owns spec.plan")
    problems = apply_claims(view, (claim("db", plan="large"),), SOURCE)
    assert [p.file for p in problems] == ["claims/db.yaml"]
    assert "App Cluster refused" in problems[0].message
    assert "another field manager" in problems[0].fix
    assert view.events == [("db", "ApplyFailed", "argocd owns spec.plan")]
    assert (KIND, CP_NS, "db") not in view.cp  # the Control Plane copy waits for the App one


def test_a_kubectl_field_conflict_is_taken_over_and_applied_again() -> None:
    view = mapped_view()
    view.put_app(
        ours(
            "db",
            resourceVersion="7",
            managedFields=[{"manager": "kubectl", "operation": "Update", "fieldsV1": {}}],
        )
    )
    view.refuse[("apply", "app", "db")] = KubeError(409, "Conflict", "kubectl owns spec.plan")
    assert apply_claims(view, (claim("db", plan="large"),), SOURCE) == []
    verbs = [w[0] for w in view.writes if w[1] == "app"]
    assert verbs == ["patch", "apply"]
    assert view.app[(KIND, APP_NS, "db")]["metadata"]["managedFields"] == [{}]


# -- prune, finalize, deletion protection ------------------------------------------------


def test_prune_deletes_what_git_no_longer_names() -> None:
    view = mapped_view()
    view.put_app(ours("kept"))
    view.put_app(ours("gone"))
    problems = prune(view, DesiredState((claim("kept"),), ()), conflicts=())
    assert problems == []
    assert [w for w in view.writes if w[0] == "delete"] == [("delete", "app", KIND, APP_NS, "gone")]


def test_prune_spares_what_a_rejected_document_names() -> None:
    view = mapped_view()
    view.put_app(ours("typo"))
    rejected = Rejection("claims/typo.yaml", "bad", "fix", 0, identity=claim("typo").identity)
    prune(view, DesiredState((), (rejected,)), conflicts=())
    assert view.writes == []


def test_prune_holds_a_deletion_protected_claim() -> None:
    view = mapped_view()
    obj = ours("db")
    obj["metadata"]["annotations"][objects.DELETION_PROTECTION] = "true"
    view.put_app(obj)
    problems = prune(view, DesiredState((), ()), conflicts=())
    assert view.writes == []
    assert [p.file for p in problems] == ["claims/db.yaml"]
    assert "deletion-protected" in problems[0].message
    assert [e[:2] for e in view.events] == [("db", "DeletionRefused")]


def test_prune_leaves_a_kind_in_konnector_conflict_alone() -> None:
    view = mapped_view()
    view.put_app(ours("gone"))
    prune(view, DesiredState((), ()), conflicts={EXPORT.name})
    assert view.writes == []


def deleting(name: str, protected: bool = False) -> dict:
    obj = ours(name, deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="7")
    if protected:
        obj["metadata"]["annotations"][objects.DELETION_PROTECTION] = "true"
    return obj


def test_finalize_deletes_the_control_plane_copy_before_releasing_the_app_claim() -> None:
    view = mapped_view()
    view.put_app(deleting("db"))
    view.put_cp(objects.control_plane_object(claim("db"), CP_NS))
    finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert view.writes == [("delete", "cp", KIND, CP_NS, "db")]  # the finalizer stays for now
    view.writes.clear()
    held, problems = finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert (held, problems) == (set(), [])
    assert [w[0] for w in view.writes] == ["delete", "patch"]
    assert view.app[(KIND, APP_NS, "db")]["metadata"]["finalizers"] is None
    assert [e[:2] for e in view.normal_events] == [("db", "Deleted")]  # only once released


def test_finalize_holds_a_deletion_protected_claim_with_one_event() -> None:
    view = mapped_view()
    view.put_app(deleting("db", protected=True))
    view.put_cp(objects.control_plane_object(claim("db"), CP_NS))
    held, problems = finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert held == {claim("db").identity}
    assert "is being deleted but is deletion-protected" in problems[0].message
    held, problems = finalize(view, REPO, (APP_NS,), "claims", (), held, in_git=())
    assert len(problems) == 1  # reported every pass ...
    assert len(view.events) == 1  # ... but an Event only once
    assert view.writes == []
    assert (KIND, CP_NS, "db") in view.cp


def test_finalize_waits_for_the_mapping() -> None:
    view = FakeView([EXPORT])
    view.put_app(deleting("db"))
    finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert view.writes == []


# -- observe -----------------------------------------------------------------------------


def with_secret(name: str) -> Claim:
    """A claim whose provider writes the connection Secret ``name``."""
    base = claim("db")
    spec = {"plan": "nano", "writeConnectionSecretToRef": {"name": name}}
    return Claim(base.identity, base.api_version, {**base.body, "spec": spec}, base.location)


def test_observe_copies_status_and_secrets_and_reports_git_the_status() -> None:
    view = mapped_view()
    db = with_secret("s")
    view.put_app(ours("db", uid="u-db", generation=1))
    upstream = objects.control_plane_object(db, CP_NS)
    upstream["status"] = {"phase": "Ready"}
    view.put_cp(upstream)
    view.put_cp(
        {"kind": "Secret", "metadata": {"namespace": CP_NS, "name": "s"}, "data": {"k": "dg=="}}
    )
    view.synced_secrets.add(CP_NS)
    statuses = observe(view, DesiredState((db,), ()), (db,), REPO)
    assert statuses == (
        ObservedStatus(db.identity, f"{GROUP}/v1", {"phase": "Ready"}, "claims/db.yaml", 0),
    )
    # no conditions to stamp, and no top-level observedGeneration (not declared in this schema)
    assert view.app[(KIND, APP_NS, "db")]["status"] == {"phase": "Ready"}
    secret = view.app[("Secret", APP_NS, "s")]
    assert secret["data"] == {"k": "dg=="}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-db"


def test_observe_copies_no_secret_from_an_unfilled_cache() -> None:
    view = mapped_view()
    db = with_secret("s")
    view.put_app(ours("db", uid="u-db"))
    view.put_cp(objects.control_plane_object(db, CP_NS))
    view.put_cp({"kind": "Secret", "metadata": {"namespace": CP_NS, "name": "s"}, "data": {}})
    observe(view, DesiredState((db,), ()), (db,), REPO)
    assert not [w for w in view.writes if w[2] == "Secret"]
    view.synced_secrets.add(CP_NS)
    observe(view, DesiredState((db,), ()), (db,), REPO)
    assert [w for w in view.writes if w[2] == "Secret"] == [("apply", "app", "Secret", APP_NS, "s")]


def test_observe_drops_a_copied_secret_its_claim_no_longer_names() -> None:
    view = mapped_view()
    view.put_app(
        {
            "kind": "Secret",
            "metadata": {
                "namespace": APP_NS,
                "name": "old",
                "labels": {objects.REPOSITORY_LABEL: REPO},
                "ownerReferences": [{"kind": KIND, "name": "db"}],
            },
        }
    )
    observe(view, DesiredState((claim("db"),), ()), (claim("db"),), REPO)
    assert view.writes == [("delete", "app", "Secret", APP_NS, "old")]


# -- write-back scheduling ---------------------------------------------------------------


def test_write_back_skips_a_status_git_already_holds() -> None:
    schedule = Schedule(Mode.INLINE, "repo")
    held, fresh = claim("held", status={"phase": "Ready"}), claim("fresh")
    statuses = tuple(
        ObservedStatus(c.identity, c.api_version, {"phase": "Ready"}) for c in (held, fresh)
    )
    assert schedule.plan(DesiredState((held, fresh), ()), statuses, [], "s1") is True
    assert schedule.report is not None
    assert [s.identity.name for s in schedule.report.statuses] == ["fresh"]
    counts = {"claims": 2, "rejected": 0, "problems": 0, "ready": 0, "held": 0}
    assert schedule.report.summary.counts == counts


def test_write_back_in_files_mode_writes_every_status() -> None:
    schedule = Schedule(Mode.FILES, "repo")
    held = claim("held", status={"phase": "Ready"})
    statuses = (ObservedStatus(held.identity, held.api_version, {"phase": "Ready"}),)
    schedule.plan(DesiredState((held,), ()), statuses, [], "s1")
    assert schedule.report is not None
    assert schedule.report.statuses == statuses


def test_write_back_is_scheduled_only_when_what_was_observed_changed() -> None:
    schedule = Schedule(Mode.FILES, "repo")
    db = claim("db")
    ready = (
        ObservedStatus(
            db.identity, db.api_version, {"conditions": [{"type": "Ready", "status": "True"}]}
        ),
    )
    desired = DesiredState((db,), ())
    # no source commit: nothing to note, so only what was observed schedules a write-back
    assert schedule.plan(desired, ready, [], "") is True
    assert schedule.plan(desired, ready, [], "") is False
    problem = Failed(file="claims/db.yaml", message="refused", fix="fix")
    assert schedule.plan(desired, ready, [problem], "") is True
    assert schedule.report is not None
    assert schedule.report.summary.counts["ready"] == 1
    assert schedule.report.summary.rejections == (problem,)


# -- claims tell on themselves ------------------------------------------------------------

PROVIDER_STATUS = {
    "conditions": [{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]
}


def synced(view: FakeView, name: str = "db") -> dict | None:
    status = view.app[(KIND, APP_NS, name)].get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == "Synced"), None)


def live_and_copy(view: FakeView, name: str = "db") -> None:
    """A claim an earlier pass applied, whose provider reports Synced."""
    view.put_app({**ours(name), "status": PROVIDER_STATUS})
    view.put_cp({**objects.control_plane_object(claim(name), CP_NS), "status": PROVIDER_STATUS})


def test_a_refused_document_puts_synced_false_and_one_event_on_its_live_claim() -> None:
    view = mapped_view()
    live_and_copy(view)
    refused = Rejection(
        "claims/db.yaml",
        "plan 'jumbo' is not offered",
        "use nano",
        0,
        "spec.plan",
        claim("db").identity,
    )
    for _ in range(3):  # passes
        observe(view, DesiredState((), (refused,)), (), REPO)
    condition = synced(view)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "ReconcileError")
    assert "claims/db.yaml (document 1), field spec.plan" in condition["message"]
    assert "use nano" in condition["message"]
    assert [e[:2] for e in view.events] == [("db", "ReconcileError")]  # told once, not per pass
    assert [w[0] for w in view.writes] == ["apply-status"]


def test_a_fixed_document_gives_the_claim_its_providers_synced_back() -> None:
    view = mapped_view()
    live_and_copy(view)
    refused = Rejection("claims/db.yaml", "bad", "fix", 0, identity=claim("db").identity)
    observe(view, DesiredState((), (refused,)), (), REPO)
    observe(view, DesiredState((claim("db"),), ()), (claim("db"),), REPO)
    assert synced(view) == PROVIDER_STATUS["conditions"][0]


def test_a_refused_control_plane_apply_tells_on_the_mirrored_claim() -> None:
    view = mapped_view()
    live_and_copy(view)
    changed = claim("db", plan="large")
    view.refuse[("apply", "cp", "db")] = KubeError(422, "Invalid", "spec.plan: Unsupported")
    problems = apply_claims(view, (changed,), SOURCE)
    observe(view, DesiredState((changed,), ()), (changed,), REPO, problems)
    condition = synced(view)
    assert condition is not None
    assert condition["status"] == "False"
    assert "Control Plane refused" in condition["message"]


def test_a_refusal_of_another_repositorys_claim_is_not_told() -> None:
    view = mapped_view()
    live_and_copy(view)
    view.app[(KIND, APP_NS, "db")]["metadata"]["labels"][objects.REPOSITORY_LABEL] = "other"
    refused = Rejection("claims/db.yaml", "bad", "fix", 0, identity=claim("db").identity)
    observe(view, DesiredState((), (refused,)), (), REPO)
    assert view.writes == []
    assert view.events == []


def test_a_claim_left_out_by_a_stage_is_not_told() -> None:
    """A kind a foreign konnector serves (konnector.refuse_foreign): the konnector writes that
    claim's status, a second writer would fight it."""
    view = mapped_view()
    live_and_copy(view)
    foreign = Foreign(
        file="claims/db.yaml",
        message="not synced",
        fix="fix",
        document=0,
        identity=claim("db").identity,
    )
    observe(view, DesiredState((claim("db"),), ()), (), REPO, (foreign,))
    assert view.writes == []
    assert synced(view) == PROVIDER_STATUS["conditions"][0]
