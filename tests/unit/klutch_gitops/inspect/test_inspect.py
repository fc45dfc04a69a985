"""klutch-gitops get / reconcile / suspend / resume: parsing, columns and output formats."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from klutch_gitops.apis import REPOSITORY_BINDINGS, REQUESTED_AT_ANNOTATION, SUSPEND_ANNOTATION
from klutch_gitops.errors import KlutchError
from klutch_gitops.inspect import claims, commands, registrations, repositories, steer, watch
from klutch_gitops.inspect.access import connect, refused
from klutch_gitops.inspect.show import CLAIMS, REPOSITORIES, render, watch_lines, widths_of
from klutch_gitops.inspect.table import Output, age, name_of, short
from klutch_gitops.inspect.watch import changes
from klutch_gitops.kube.client import KubeError, Resource

NOW = dt.datetime(2026, 1, 2, 12, 0, 0, tzinfo=dt.UTC)


def binding(name: str = "team", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": REPOSITORY_BINDINGS.api_version,
        "kind": "RepositoryBinding",
        "metadata": {
            "name": name,
            "namespace": "cluster-abc",
            "creationTimestamp": "2026-01-02T11:56:40Z",
        },
        "spec": {"url": "https://git.example/team.git", "path": "claims"},
        "status": status,
    }


def refused_binding() -> dict[str, Any]:
    return binding(
        "bad",
        conditions=[
            {
                "type": "Ready",
                "status": "False",
                "reason": "DocumentsRefusedBecauseOfAVeryLongReason",
                "message": "1 of 2 documents refused",
            }
        ],
        lastAppliedCommit="0123456789abcdef0123",
        lastStatusCommit="fedcba9876543210",
        claims=1,
        rejected=1,
        refusals=[{"file": "claims/bad.yaml", "message": "namespace not-ours is not yours"}],
    )


# --- REPO -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("team", ("ctx-ns", "team")), ("cluster-abc/team", ("cluster-abc", "team"))],
)
def test_repo_is_name_or_namespace_slash_name(text: str, expected: tuple[str, str]) -> None:
    assert steer.parse_repo(text, "ctx-ns") == expected


@pytest.mark.parametrize("text", ["", "a/b/c", "Team", "/team", "team/", "-team"])
def test_a_malformed_repo_is_refused_with_the_expected_shape(text: str) -> None:
    with pytest.raises(KlutchError, match="NAME or NAMESPACE/NAME"):
        steer.parse_repo(text, "ns")


def test_a_repo_namespace_that_contradicts_dash_n_is_refused() -> None:
    assert steer.parse_repo("ns/team", "ns", explicit_namespace=True) == ("ns", "team")
    with pytest.raises(KlutchError, match="names namespace other, but -n says ns"):
        steer.parse_repo("other/team", "ns", explicit_namespace=True)


def test_patches_touch_annotations_only_and_none_removes() -> None:
    patch = steer.annotations_patch({SUSPEND_ANNOTATION: None, REQUESTED_AT_ANNOTATION: "t"})
    assert patch == {
        "metadata": {"annotations": {SUSPEND_ANNOTATION: None, REQUESTED_AT_ANNOTATION: "t"}}
    }
    assert json.dumps(patch).count("null") == 1  # RFC 7386: null deletes the key


def test_requested_at_is_rfc3339_utc_with_microseconds() -> None:
    value = steer.requested_at(dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC))
    assert value == "2026-01-02T03:04:05.000006Z"
    assert dt.datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None


# --- columns ---------------------------------------------------------------------------------


def test_repository_columns() -> None:
    assert repositories.headers(wide=False, all_namespaces=False) == [
        "NAME", "READY", "REASON", "APPLIED", "CLAIMS", "REFUSED", "STATUS COMMIT", "SUSPENDED",
        "AGE",
    ]  # fmt: skip
    assert repositories.row(refused_binding(), False, False, NOW) == [
        "bad",
        "False",
        "DocumentsRefusedBecau...",
        "0123456789ab",
        "1",
        "1",
        "fedcba987654",
        "false",
        "3m20s",
    ]


def test_all_namespaces_adds_namespace_first_and_wide_adds_the_source_and_message() -> None:
    headers = repositories.headers(wide=True, all_namespaces=True)
    cells = repositories.row(refused_binding(), True, True, NOW)
    assert headers[0] == "NAMESPACE"
    assert cells[0] == "cluster-abc"
    assert headers[-4:] == ["URL", "BRANCH", "PATH", "MESSAGE"]
    assert cells[-4:-1] == ["https://git.example/team.git", "main", "claims"]
    assert (
        cells[-1] == "1 of 2 documents refused [claims/bad.yaml: namespace not-ours is not yours]"
    )


def test_a_binding_without_status_shows_unknown_and_blanks() -> None:
    cells = repositories.row(binding(), False, False, NOW)
    assert cells[1:8] == ["Unknown", "", "", "", "", "", "false"]


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"annotations": {SUSPEND_ANNOTATION: "true"}}},
        {"metadata": {"annotations": {SUSPEND_ANNOTATION: "True"}}},
        {"metadata": {}, "spec": {"suspend": True}},
    ],
)
def test_suspended_by_spec_or_annotation(obj: dict[str, Any]) -> None:
    assert repositories.suspended(obj)


def test_not_suspended_by_false_or_absent() -> None:
    assert not repositories.suspended({"metadata": {"annotations": {SUSPEND_ANNOTATION: "false"}}})
    assert not repositories.suspended({"metadata": {}})


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(5, "5s"), (119, "119s"), (200, "3m20s"), (600, "10m"), (3 * 3600 + 60, "3h1m"),
     (30 * 3600, "30h"), (3 * 86400 + 3600, "3d1h"), (400 * 86400, "400d"),
     (3 * 365 * 86400, "3y")],
)  # fmt: skip
def test_age_is_kubectls_human_duration(seconds: int, shown: str) -> None:
    created = (NOW - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert age(created, NOW) == shown


def test_short_keeps_one_line_within_width() -> None:
    assert short("a\nb  c", 10) == "a b c"
    assert short("x" * 20, 10) == "xxxxxxx..."


def test_claim_reason_is_the_first_condition_not_true() -> None:
    claim = {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": "db",
            "namespace": "apps",
            "labels": {claims.REPOSITORY_LABEL: "cluster-abc.team"},
            "creationTimestamp": "2026-01-02T11:59:00Z",
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Available"},
                {"type": "Synced", "status": "False", "reason": "Refused", "message": "bad plan"},
            ]
        },
    }
    assert claims.row(claim, False, NOW) == [
        "PostgresqlInstance", "db", "True", "False", "Refused: bad plan", "cluster-abc.team", "60s",
    ]  # fmt: skip
    assert claims.headers(True)[0] == "NAMESPACE"
    assert render(CLAIMS, [claim], Output.name, False, "") == ["postgresqlinstance.anynines.com/db"]


# --- output formats --------------------------------------------------------------------------


def test_table_is_padded_like_kubectl() -> None:
    lines = render(REPOSITORIES, [refused_binding(), binding()], Output.table, False, "")
    assert lines[0].startswith("NAME   READY     REASON")
    assert lines[1].startswith("bad    False     DocumentsRefusedBecau...")
    assert lines[2].startswith("team   Unknown")


def test_name_json_yaml_and_empty() -> None:
    objects = [binding()]
    assert render(REPOSITORIES, objects, Output.name, False, "") == [
        "repositorybinding.gitops.klutch.anynines.com/team"
    ]
    (text,) = render(REPOSITORIES, objects, Output.json, False, "")
    assert json.loads(text) == {
        "apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}
    }  # fmt: skip
    (text,) = render(REPOSITORIES, objects, Output.yaml, False, "")
    assert yaml.safe_load(text)["items"] == objects
    assert render(REPOSITORIES, [], Output.table, False, " in ns namespace") == [
        "No RepositoryBindings found in ns namespace."
    ]


def test_watch_rows_line_up_under_the_first_table() -> None:
    table = render(REPOSITORIES, [refused_binding()], Output.table, False, "")
    widths = widths_of(table, REPOSITORIES, False, False)
    changed = binding("b", conditions=[{"type": "Ready", "status": "True", "reason": "Synced"}])
    (line,) = watch_lines(REPOSITORIES, [changed], Output.table, False, widths)
    assert line.index("True") == table[0].index("READY")
    assert line.index("Synced") == table[0].index("REASON")
    (text,) = watch_lines(REPOSITORIES, [binding("b")], Output.json, False, widths)
    assert json.loads(text)["metadata"]["name"] == "b"  # one object per change, not a List


# --- watch, wait and errors with a fake API (pure logic) ---------------------------------------


class FakeKube:
    """Answers a script of watch streams, lists and gets; records patches."""

    def __init__(self, streams: list[Any] | None = None, gets: list[dict] | None = None) -> None:
        self.streams = streams or []
        self.gets = gets or []
        self.versions: list[str] = []

    def watch(self, _resource: Any, _ns: Any, version: str, _selector: Any = None) -> Any:
        self.versions.append(version)
        stream = self.streams.pop(0)
        if isinstance(stream, KubeError):
            raise stream
        yield from stream

    def list(self, _resource: Any, _ns: Any, _selector: Any = None) -> tuple[list[dict], str]:
        return [binding("relisted")], "900"

    def get(self, _resource: Any, _ns: Any, _name: str) -> dict | None:
        return self.gets.pop(0) if len(self.gets) > 1 else self.gets[0]


def rv(obj: dict, version: str) -> dict:
    obj["metadata"]["resourceVersion"] = version
    return obj


def test_watch_resumes_after_its_last_event_and_relists_on_410() -> None:
    kube = FakeKube(
        [
            [("ADDED", rv(binding("a"), "5")), ("BOOKMARK", rv(binding("-"), "7"))],
            KubeError(410, "Gone", "too old"),
            [("MODIFIED", rv(binding("b"), "901"))],
        ]
    )
    seen = changes(kube, REPOSITORY_BINDINGS, "ns", "1")  # type: ignore[arg-type]
    names = [next(seen)["metadata"]["name"] for _ in range(3)]
    assert names == ["a", "relisted", "b"]
    assert kube.versions == ["1", "7", "900"]


def test_watch_passes_other_errors_on() -> None:
    kube = FakeKube([KubeError(403, "Forbidden", "no")])
    with pytest.raises(KubeError):
        next(changes(kube, REPOSITORY_BINDINGS, "ns", "1"))  # type: ignore[arg-type]


def test_wait_returns_the_answer_and_times_out_with_what_it_saw() -> None:
    waiting, answered = binding(), binding(lastHandledReconcileAt="T")
    kube = FakeKube(gets=[waiting, answered])
    assert steer.wait_handled(kube, "ns", "team", "T", 5, sleep=lambda _s: None) is answered  # type: ignore[arg-type]
    kube = FakeKube(gets=[binding(lastHandledReconcileAt="older")])
    with pytest.raises(KlutchError, match=r"did not answer the request T within 0s .*older"):
        steer.wait_handled(kube, "ns", "team", "T", 0, sleep=lambda _s: None)  # type: ignore[arg-type]


def test_forbidden_names_verb_resource_namespace_and_the_chart_roles() -> None:
    error = refused(KubeError(403, "Forbidden", "denied"), "list", REPOSITORY_BINDINGS, "other")
    assert "may not list repositorybindings.gitops.klutch.anynines.com in namespace other" in str(
        error
    )
    assert "klutch-gitops-repositorybindings-view" in error.fix
    unreachable = refused(ConnectionRefusedError("refused"), "get", REPOSITORY_BINDINGS, None)
    assert unreachable.message.startswith("cannot reach the cluster")


# --- kubeconfig ------------------------------------------------------------------------------


def kubeconfig(path: Path, namespace: str | None = "team-ns") -> Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "one",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [
                    {"name": "one", "context": context},
                    {"name": "two", "context": {"cluster": "c", "user": "u"}},
                ],
            }
        )
    )
    return path


def test_namespace_comes_from_flag_then_context_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path / "config")
    assert connect(path, None, None).namespace == "team-ns"
    assert connect(path, None, "given").namespace == "given"
    assert connect(path, "two", None).namespace == "default"
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{path}")  # merged like kubectl
    assert connect(None, None, None).context == "one"


def test_kubeconfig_errors_name_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KlutchError, match="no kubeconfig at"):
        connect(tmp_path / "nope", None, None)
    with pytest.raises(
        KlutchError, match=r"no context three in the kubeconfig \(it has: one, two\)"
    ):
        connect(kubeconfig(tmp_path / "config"), "three", None)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KlutchError, match=r"no kubeconfig at .*absent \(\$KUBECONFIG\)"):
        connect(None, None, None)
    (tmp_path / "garbage").write_text("- not a kubeconfig")
    with pytest.raises(KlutchError, match="cannot load a kubeconfig"):
        connect(tmp_path / "garbage", None, None)


def test_commands_register_and_an_unreachable_cluster_is_one_clear_error(tmp_path: Path) -> None:
    app = typer.Typer()
    commands.register(app)
    path = str(kubeconfig(tmp_path / "config"))
    runner = CliRunner()
    for args in (["get", "--kubeconfig", path], ["reconcile", "team", "--kubeconfig", path]):
        result = runner.invoke(app, args)
        assert isinstance(result.exception, KlutchError), result.output
        assert result.exception.message.startswith("cannot reach the cluster")


def test_registering_the_commands_does_not_load_the_kubernetes_client() -> None:
    """``klutch-gitops --help`` stays quick: the client loads when a command runs."""
    import subprocess
    import sys

    probe = "import sys, klutch_gitops.inspect.commands; print('kubernetes' in sys.modules)"
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "False"


def test_an_answered_request_fails_when_the_binding_is_not_ready() -> None:
    """`flux reconcile` exits non-zero when the handled reconcile left Ready False; so do we."""
    meta = {"name": "shop", "namespace": "team"}
    failed = {"type": "Ready", "status": "False", "reason": "DocumentsRefused", "message": "x"}
    with pytest.raises(KlutchError) as refused_error:
        steer.check_ready({"metadata": meta, "status": {"conditions": [failed]}})
    assert "team/shop" in refused_error.value.message
    assert "DocumentsRefused" in refused_error.value.message
    ready = {**failed, "status": "True", "reason": "Synced"}
    assert steer.check_ready({"metadata": meta, "status": {"conditions": [ready]}}).startswith(
        "Ready=True Synced"
    )
    busy = {**failed, "status": "Unknown", "reason": "Progressing"}  # not a failure
    assert "Progressing" in steer.check_ready({"metadata": meta, "status": {"conditions": [busy]}})


class KindsWatched:
    """A Kube whose watch of each kind yields its events once, then waits (a quiet watch)."""

    def __init__(self, events: dict[str, list[dict]], failing: str | None = None) -> None:
        self.events = events
        self.failing = failing
        self.asked: list[tuple[str, str | None, str, str | None]] = []

    def watch(
        self, resource: Resource, namespace: str | None, version: str, label: str | None = None
    ) -> Iterator[tuple[str, dict]]:
        self.asked.append((resource.plural, namespace, version, label))
        if resource.plural == self.failing:
            raise KubeError(403, "Forbidden", "watch refused")
        for obj in self.events.pop(resource.plural, []):
            yield "MODIFIED", obj
        threading.Event().wait(30)  # nothing more; the daemon thread ends with the test process


def test_claims_of_every_kind_are_watched_at_once() -> None:
    db = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")
    sb = Resource("anynines.com", "v1", "servicebindings", "ServiceBinding")
    kube = KindsWatched(
        {
            "postgresqlinstances": [{"metadata": {"name": "db", "resourceVersion": "7"}}],
            "servicebindings": [{"metadata": {"name": "sb", "resourceVersion": "8"}}],
        }
    )
    found = watch.merged_changes(kube, {db: "5", sb: "6"}, "team", "label")  # type: ignore[arg-type]
    seen = {(obj["kind"], obj["metadata"]["name"]) for obj in itertools.islice(found, 2)}
    assert seen == {("PostgresqlInstance", "db"), ("ServiceBinding", "sb")}
    assert sorted(kube.asked) == [
        ("postgresqlinstances", "team", "5", "label"),  # from each kind's own list
        ("servicebindings", "team", "6", "label"),
    ]


def test_a_refused_claim_watch_ends_the_watch_with_its_error() -> None:
    db = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")
    kube = KindsWatched({}, failing="postgresqlinstances")
    with pytest.raises(KubeError) as refused_watch:
        next(watch.merged_changes(kube, {db: "5"}, None))  # type: ignore[arg-type]
    assert refused_watch.value.status == 403


def test_registrations_need_the_metrics_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(registrations.TOKEN_ENV, raising=False)
    with pytest.raises(KlutchError) as missing:
        registrations.token(None)
    assert "--token-file" in missing.value.fix
    with pytest.raises(KlutchError) as unreadable:
        registrations.token(tmp_path / "nope")
    assert "nope" in unreadable.value.message
    monkeypatch.setenv(registrations.TOKEN_ENV, " s3cret\n")
    assert registrations.token(None) == "s3cret"


def test_a_registration_shows_in_the_repository_columns() -> None:
    entry = {
        "name": "team-a",
        "source": "config",
        "spec": {"url": "file:///r.git", "branch": "main", "path": "claims", "suspend": True},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]},
    }
    shown = registrations.as_object(entry)
    cells = repositories.row(shown, False, False, NOW)
    assert cells[:3] == ["team-a", "True", "Synced"]
    assert cells[7] == "true"  # suspended
    assert name_of(shown) == "registration.gitops.klutch.anynines.com/team-a"


def test_an_unreachable_reconciler_is_one_clear_error() -> None:
    with pytest.raises(KlutchError) as unreachable:
        registrations.fetch("http://127.0.0.1:1", "token", timeout=2)
    assert "cannot reach the reconciler at http://127.0.0.1:1/registrations" in (
        unreachable.value.message
    )
