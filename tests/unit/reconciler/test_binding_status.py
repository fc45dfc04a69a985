"""RepositoryBinding status decisions (reconciler/status.py): kstatus conditions from a report."""

from __future__ import annotations

from klutch_gitops.kube.conditions import by_type
from reconciler.manifests import Identity, Rejection
from reconciler.status import Report, binding_status, invalid_spec_status
from reconciler.sync.outcome import Failed, Held, PassOutcome, documents

HEAD = "a" * 40
REFUSED = Rejection("claims/bad.yaml", "namespace not-ours is not allowed", "use team", 0)
CLEAN = PassOutcome(HEAD, 2, ())
DONE = Report(generation=3, registered=True, head=HEAD, last_pass=CLEAN, pending=False)


def statuses(report: Report, previous: dict | None = None, now: str = "t1") -> dict[str, str]:
    found = by_type(binding_status(report, previous, now))
    return {kind: f"{c['status']}/{c['reason']}" for kind, c in found.items()}


def test_a_clean_pass_is_ready() -> None:
    status = binding_status(DONE, None, "t1")
    assert statuses(DONE) == {
        "Ready": "True/Synced",
        "Reconciling": "False/Done",
        "Stalled": "False/NotStalled",
        "SecretValid": "True/SecretsResolved",
        "KonnectorConflict": "False/NoForeignKonnector",
        "Fetched": "True/Fetched",
        "Applied": "True/Applied",
        "WrittenBack": "True/UpToDate",
    }
    assert status["observedGeneration"] == 3
    assert {c["observedGeneration"] for c in status["conditions"]} == {3}
    assert (status["lastFetchedCommit"], status["lastAppliedCommit"]) == (HEAD, HEAD)
    assert (status["claims"], status["rejected"]) == (2, 0)
    assert "refusals" not in status
    assert "lastStatusCommit" not in status


def test_refused_documents_stall_and_are_listed() -> None:
    outcome = PassOutcome(HEAD, 1, (REFUSED, REFUSED))  # two problems of one document
    report = Report(generation=1, registered=True, head=HEAD, last_pass=outcome, pending=False)
    status = binding_status(report, None, "t1")
    found = by_type(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "DocumentsRefused")
    assert "claims/bad.yaml" in found["Ready"]["message"]
    assert (found["Stalled"]["status"], found["Reconciling"]["status"]) == ("True", "False")
    assert status["rejected"] == 1
    assert status["refusals"][0] == {
        "file": "claims/bad.yaml",
        "document": 0,
        "message": "namespace not-ours is not allowed",
        "fix": "use team",
    }


def test_work_under_way_is_reconciling_with_ready_unknown() -> None:
    cases = {
        "Registering": Report(generation=1),
        "Fetching": Report(generation=1, registered=True),
        "Progressing": Report(generation=1, registered=True, head=HEAD),
        "NamespaceMappingPending": Report(
            generation=1, registered=True, head=HEAD, last_pass=CLEAN, pending=True
        ),
        "NewGeneration": Report(
            generation=1,
            latest_generation=2,
            registered=True,
            head=HEAD,
            last_pass=CLEAN,
            pending=False,
        ),
    }
    for reason, report in cases.items():
        found = statuses(report)
        assert found["Reconciling"] == f"True/{reason}", reason
        assert found["Ready"] == "Unknown/Progressing", reason
        assert found["Stalled"] == "False/NotStalled", reason


def test_a_failed_pass_is_retried_not_stalled() -> None:
    report = Report(**{**DONE.__dict__, "error": "fetch failed: 503"})
    found = statuses(report)
    assert found["Ready"] == "False/SyncFailed"
    assert found["Reconciling"] == "True/Retrying"
    assert found["Stalled"] == "False/NotStalled"


def test_an_invalid_secret_stalls() -> None:
    broken = "App Cluster kubeconfig is not a usable kubeconfig"
    report = Report(generation=1, error=broken, reference_error=broken)
    found = statuses(report)
    assert found["Ready"] == "False/SecretInvalid"
    assert found["Stalled"] == "True/SecretInvalid"
    assert found["Reconciling"] == "False/Done"
    assert found["SecretValid"] == "False/SecretInvalid"
    assert "KonnectorConflict" not in found  # no sync, nothing known of konnectors


def test_a_foreign_konnector_stalls() -> None:
    report = Report(**{**DONE.__dict__, "conflicts": "konnector of team-b. Fix: rebind"})
    found = statuses(report)
    assert found["Ready"] == "False/ForeignKonnector"
    assert found["Stalled"] == "True/ForeignKonnector"
    assert found["KonnectorConflict"] == "True/ForeignKonnector"


def test_times_are_kept_while_statuses_stay() -> None:
    first = binding_status(DONE, None, "t1")
    later = binding_status(Report(**{**DONE.__dict__, "generation": 4}), first, "t2")
    assert {c["lastTransitionTime"] for c in later["conditions"]} == {"t1"}
    refused = Report(**{**DONE.__dict__, "last_pass": PassOutcome(HEAD, 1, (REFUSED,))})
    moved = by_type(binding_status(refused, first, "t3"))
    assert moved["Ready"]["lastTransitionTime"] == moved["Stalled"]["lastTransitionTime"] == "t3"
    assert moved["SecretValid"]["lastTransitionTime"] == "t1"


def test_conditions_of_no_longer_reported_types_go() -> None:
    first = binding_status(DONE, None, "t1")
    unregistered = binding_status(Report(generation=3), first, "t2")
    assert "KonnectorConflict" not in by_type(unregistered)


def test_an_invalid_spec_stalls() -> None:
    status = invalid_spec_status("url: file:// is not allowed", 2, None, "t1")
    found = by_type(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "InvalidSpec")
    assert (found["Stalled"]["status"], found["Stalled"]["reason"]) == ("True", "InvalidSpec")
    assert status["observedGeneration"] == 2


STAGE = Failed(
    file="claims/db.yaml",
    message="the Control Plane refused the claim: 500",
    fix="retried",
    document=0,
)


def test_each_step_of_the_pass_has_a_condition() -> None:
    found = statuses(DONE)
    assert (found["Fetched"], found["Applied"]) == ("True/Fetched", "True/Applied")
    assert found["WrittenBack"] == "True/UpToDate"
    committed = statuses(Report(**{**DONE.__dict__, "last_status_commit": "c" * 40}))
    assert committed["WrittenBack"] == "True/WrittenBack"
    before_a_pass = statuses(Report(generation=1, registered=True, head=HEAD))
    assert before_a_pass["WrittenBack"] == "Unknown/Pending"
    assert "Fetched" not in statuses(Report(generation=1))  # nothing runs yet


def test_a_failed_fetch_is_retried_with_its_error() -> None:
    report = Report(**{**DONE.__dict__, "fetch_error": "git fetch failed: 503", "error": "x"})
    status = binding_status(report, None, "t1")
    found = by_type(status)
    assert (found["Fetched"]["status"], found["Fetched"]["reason"]) == ("False", "FetchFailed")
    assert found["Fetched"]["message"] == "git fetch failed: 503"
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "FetchFailed")
    assert (found["Reconciling"]["status"], found["Stalled"]["status"]) == ("True", "False")


def test_a_stage_problem_is_retried_not_stalled() -> None:
    outcome = PassOutcome(HEAD, 1, (), (STAGE,))
    found = by_type(binding_status(Report(**{**DONE.__dict__, "last_pass": outcome}), None, "t"))
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "ApplyFailed")
    assert (found["Applied"]["status"], found["Applied"]["reason"]) == ("False", "ApplyFailed")
    assert (
        "claims/db.yaml#0: the Control Plane refused the claim: 500" in found["Applied"]["message"]
    )
    assert (found["Reconciling"]["status"], found["Stalled"]["status"]) == ("True", "False")


def test_a_held_deletion_is_named_as_such() -> None:
    """A deletion-protected claim being deleted is no failed apply: the binding says what holds."""
    held = Held(
        file="claims/db.yaml",
        message="db is being deleted",
        fix="put it back",
        identity=Identity("anynines.com", "PostgresqlInstance", "team", "db"),
    )
    outcome = PassOutcome(HEAD, 1, (), (held,))
    found = by_type(binding_status(Report(**{**DONE.__dict__, "last_pass": outcome}), None, "t"))
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "DeletionHeld")
    assert "db is being deleted" in found["Ready"]["message"]


def test_a_loader_refusal_names_file_document_and_field() -> None:
    refusal = Rejection("claims/bad.yaml", "unknown plan", "use small", 2, "spec.plan")
    outcome = PassOutcome(HEAD, 1, (refusal,), (STAGE,))
    found = by_type(binding_status(Report(**{**DONE.__dict__, "last_pass": outcome}), None, "t"))
    assert found["Stalled"]["reason"] == "DocumentsRefused"
    assert "claims/bad.yaml#2 spec.plan: unknown plan. Fix: use small" in found["Ready"]["message"]


def test_a_failed_write_back_is_retried() -> None:
    report = Report(**{**DONE.__dict__, "write_back_error": "push refused: 403"})
    found = statuses(report)
    assert found["WrittenBack"] == "False/WriteBackFailed"
    assert found["Ready"] == "False/WriteBackFailed"
    assert (found["Reconciling"], found["Stalled"]) == ("True/Retrying", "False/NotStalled")


def test_a_suspended_registration_keeps_its_last_figures_and_says_how_to_resume() -> None:
    before = binding_status(Report(**{**DONE.__dict__, "handled_reconcile_at": "r1"}), None, "t1")
    assert before["lastHandledReconcileAt"] == "r1"
    hint = "resume with: klutch-gitops resume team/orders"
    report = Report(generation=3, suspended=True, resume_hint=hint)
    status = binding_status(report, before, "t2")
    found = by_type(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("Unknown", "Suspended")
    assert hint in found["Ready"]["message"]
    assert found["Reconciling"]["status"] + found["Reconciling"]["reason"] == "FalseSuspended"
    assert found["Stalled"]["status"] == "False"
    assert set(found) == {"Ready", "Reconciling", "Stalled"}
    assert (status["lastAppliedCommit"], status["claims"]) == (HEAD, 2)
    assert status["lastHandledReconcileAt"] == "r1"


def test_refused_documents_are_counted_once_however_many_problems_they_have() -> None:
    problems = (
        Rejection("claims/a.yaml", "bad plan", "fix the plan", 0, field="spec.plan"),
        Rejection("claims/a.yaml", "unknown field", "drop it", 0, field="spec.x"),
        Rejection("claims/a.yaml", "bad name", "rename it", 1),
        Rejection("claims/broken.yaml", "not YAML", "fix the file"),  # the whole file
    )
    assert documents(problems) == 3  # klutch_gitops_rejected_documents and status.rejected
    assert PassOutcome("a" * 40, 1, problems).refused_documents == 3
