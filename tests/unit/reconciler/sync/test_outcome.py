"""A pass's outcome, typed (reconciler/sync/outcome.py): what the stages found keeps its order
and reads in reconcile.yaml and on the RepositoryBinding as before the types, field by field."""

from __future__ import annotations

from datetime import UTC, datetime

from klutch_gitops.kube.conditions import by_type
from reconciler.manifests import Identity, Rejection
from reconciler.status import Report, binding_status
from reconciler.sync.outcome import Failed, Foreign, Held, PassOutcome
from reconciler.sync.report import Summary, render_report

HEAD = "a" * 40
DB = Identity("anynines.com", "PostgresqlInstance", "team", "db")
OLD = Identity("anynines.com", "PostgresqlInstance", "team", "old")
REFUSED = Rejection("claims/bad.yaml", "unknown plan", "use small", 2, "spec.plan")
CRD = Failed(file="claims", message="CRD x is not managed by klutch-gitops", fix="delete it")
FOREIGN = Foreign(
    file="claims/db.yaml", document=0, identity=DB, message="db is not synced", fix="move it"
)
APPLY = Failed(
    file="claims/db.yaml", document=0, identity=DB, message="Control Plane refused db", fix="wait"
)
HELD = Held(file="claims/old.yaml", identity=OLD, message="old is being deleted", fix="put back")
FOUND = (CRD, FOREIGN, APPLY, HELD)  # in the order the stages find them

# What main rendered for these problems before they were typed (all Rejections then).
REPORT = """\
# Written by klutch-gitops after each reconcile. Edits here are overwritten.
registrations:
  team-a:
    reconciledAt: '2026-01-01T00:00:00Z'
    counts:
      claims: 1
    rejections:
    - file: claims/bad.yaml
      document: 2
      field: spec.plan
      message: unknown plan
      fix: use small
    - file: claims
      message: CRD x is not managed by klutch-gitops
      fix: delete it
    - file: claims/db.yaml
      document: 0
      object: PostgresqlInstance.anynines.com team/db
      message: db is not synced
      fix: move it
    - file: claims/db.yaml
      document: 0
      object: PostgresqlInstance.anynines.com team/db
      message: Control Plane refused db
      fix: wait
    - file: claims/old.yaml
      object: PostgresqlInstance.anynines.com team/old
      field: metadata.deletionTimestamp
      message: old is being deleted
      fix: put back
"""


def status(outcome: PassOutcome) -> dict:
    report = Report(generation=1, registered=True, head=HEAD, last_pass=outcome, pending=False)
    return binding_status(report, None, "t1")


def test_each_kind_of_problem_is_its_own_type_in_the_order_found() -> None:
    outcome = PassOutcome(HEAD, 1, (REFUSED,), FOUND)
    assert (outcome.failed, outcome.foreign, outcome.held) == ((CRD, APPLY), (FOREIGN,), (HELD,))
    assert outcome.refusals == (REFUSED, *FOUND)
    assert outcome.refused_documents == 4  # bad.yaml#2, claims, db.yaml#0, old.yaml


def test_the_report_in_git_reads_as_before() -> None:
    summary = Summary(HEAD, {"claims": 1}, (REFUSED, *FOUND), "team-a")
    assert render_report(None, summary, datetime(2026, 1, 1, tzinfo=UTC)).decode() == REPORT


def test_the_binding_lists_and_names_the_problems_as_before() -> None:
    found = status(PassOutcome(HEAD, 1, (REFUSED,), FOUND))
    assert [r.get("field") for r in found["refusals"]] == [
        "spec.plan",
        None,
        None,
        None,
        "metadata.deletionTimestamp",
    ]
    applied = by_type(found)["Applied"]
    assert applied["reason"] == "ApplyFailed"
    assert applied["message"] == (
        "4 problem(s) applying aaaaaaaaaaaa: claims: CRD x is not managed by klutch-gitops. "
        "Fix: delete it; claims/db.yaml#0: db is not synced. Fix: move it; claims/db.yaml#0: "
        "Control Plane refused db. Fix: wait"
    )
    assert by_type(found)["Stalled"]["reason"] == "DocumentsRefused"


def test_only_held_deletions_say_deletion_held() -> None:
    held = by_type(status(PassOutcome(HEAD, 1, (), (HELD,))))["Ready"]
    assert (held["reason"], held["message"]) == (
        "DeletionHeld",
        "1 problem(s) applying aaaaaaaaaaaa: claims/old.yaml metadata.deletionTimestamp: "
        "old is being deleted. Fix: put back",
    )
    assert by_type(status(PassOutcome(HEAD, 1, (), (HELD, APPLY))))["Ready"]["reason"] == (
        "ApplyFailed"
    )
