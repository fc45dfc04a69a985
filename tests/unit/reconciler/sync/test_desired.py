"""The desired-state loader: each bad input refused where a person looks, good claims still load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.manifests import Export, Identity, Location, Rejection
from reconciler.sync import claim_rules
from reconciler.sync.desired import DesiredState, Limits, load_desired

STRING = {"type": "string"}
POSTGRES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": STRING,
        "kind": STRING,
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["service", "plan"],
            "x-kubernetes-validations": [
                {
                    "rule": "self.service == oldSelf.service",
                    "message": "Service is an immutable field",
                }
            ],
            "properties": {
                "service": {"type": "string", "enum": ["a9s-postgresql13", "a9s-postgresql15"]},
                "plan": {
                    "type": "string",
                    "enum": [
                        "postgresql-single-nano",
                        "postgresql-single-small",
                        "postgresql-replica-small",
                    ],
                },
                "expose": {"type": "string", "enum": ["Internal", "LoadBalancer"]},
                "parameters": {
                    "type": "object",
                    "properties": {
                        "maxConnections": {"type": "integer", "minimum": 1},
                        "trackIoTiming": {"type": "string", "enum": ["on", "off"]},
                        "statementTimeout": {"x-kubernetes-int-or-string": True},
                        "sslCiphers": {"type": "string", "nullable": True},
                    },
                },
                "compositionRef": {"type": "object", "properties": {"name": STRING}},
                "writeConnectionSecretToRef": {"type": "object", "properties": {"name": STRING}},
            },
        },
        "status": {"type": "object", "properties": {"conditions": {"type": "array"}}},
    },
}
BINDING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["instanceRef", "serviceInstanceType"],
            "properties": {
                "instanceRef": STRING,
                "serviceInstanceType": {"type": "string", "enum": ["postgresql", "keyvalue"]},
            },
        }
    },
}
POSTGRES = Export(
    "anynines.com",
    "PostgresqlInstance",
    "postgresqlinstances",
    "Namespaced",
    {"v1": POSTGRES_SCHEMA},
)
BINDING = Export(
    "anynines.com", "ServiceBinding", "servicebindings", "Namespaced", {"v1": BINDING_SCHEMA}
)
EXPORTS = {(e.group, e.kind): e for e in (POSTGRES, BINDING)}
ALLOWED = frozenset({"team-a", "team-b"})


def postgres(name: str, namespace: str | None = "team-a", **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace} if namespace else {"name": name}
    return {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": metadata,
        "spec": {"service": "a9s-postgresql13", "plan": "postgresql-single-small", **spec},
    }


def binding(name: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "anynines.com/v1",
        "kind": "ServiceBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"instanceRef": "main", "serviceInstanceType": "postgresql"},
    }


def documents(*objects: Any) -> str:
    return "---\n".join(yaml.safe_dump(obj, sort_keys=False) for obj in objects)


def write(root: Path, name: str, content: str | bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def load(root: Path, path: str = "", **kwargs: Any) -> DesiredState:
    return load_desired(root, path, EXPORTS, kwargs.pop("allowed", ALLOWED), **kwargs)


def without(obj: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, last = path.split(".")
    node = obj
    for part in parents:
        node = node[part]
    del node[last]
    return obj


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
BROKEN = """\
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata: {name: fine, namespace: team-a}
spec: {service: a9s-postgresql13, plan: postgresql-single-small}
---
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata: {name: broken, namespace: team-a}
spec: {service: a9s-postgresql13, plan: "postgresql-single-small}
"""
GOOD = postgres(
    "main",
    compositionRef={"name": "a9s-postgresql"},
    parameters={"maxConnections": 50, "statementTimeout": "5s", "sslCiphers": None},
)
GOOD["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
TREE: dict[str, str | bytes] = {
    "apps/good.yaml": documents(GOOD, binding("main-binding")),
    "team-b/db.yml": documents(postgres("orders", "team-b")),
    "bad/alias-bomb.yaml": BILLION_LAUGHS,
    "bad/big.yaml": "# padding\n" * 110_000,
    "bad/broken.yaml": BROKEN,
    "bad/cluster-scoped.yaml": documents(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    ),
    "bad/deep.yaml": "a: " + "[" * 100 + "]" * 100 + "\n",
    "bad/deployment.yaml": documents(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a"},
        }
    ),
    "bad/latin1.yaml": b"apiVersion: v1\nkind: ConfigMap\ndata: {name: caf\xe9}\n",
    "bad/list.yaml": documents([postgres("in-a-list")]),
    "bad/many.yaml": "a: 1\n---\n" * 1001,
    "bad/no-kind.yaml": documents(without(postgres("no-kind"), "kind")),
    "bad/no-name.yaml": documents(without(postgres("x"), "metadata.name")),
    "bad/no-namespace.yaml": documents(postgres("nowhere", namespace=None)),
    "bad/other-namespace.yaml": documents(postgres("elsewhere", "team-z")),
    "bad/schema.yaml": documents(
        postgres("wrong-type", parameters={"maxConnections": "many"}),
        postgres("wrong-enum", plan="postgresql-single-tiny"),
        without(postgres("no-plan"), "spec.plan"),
        postgres("unknown-field", sizee=3),
        postgres("schema-ok", expose="Internal"),
    ),
    "bad/secret.yaml": documents(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pw", "namespace": "team-a"},
            "stringData": {"password": "hunter2"},
        },
        postgres("after-secret", "team-b"),
    ),
    "bad/typo-group.yaml": documents({**postgres("typo-group"), "apiVersion": "anynines.io/v1"}),
    "bad/typo-kind.yaml": documents({**postgres("typo-kind"), "kind": "PostgressqlInstance"}),
    "bad/v2.yaml": documents({**postgres("v2"), "apiVersion": "anynines.com/v2"}),
    "zz-copy.yaml": documents(postgres("main", plan="postgresql-single-nano")),
    # never read: not YAML, or in folders that are skipped
    "notes.txt": "not: [yaml",
    "README.md": "# claims",
    ".git/config.yaml": "not: [yaml",
    ".klutch/status.yaml": "not: [yaml",
    "apps/.klutch/status.yaml": "not: [yaml",
}
EXPECTED = [  # (file, document, field, part of the message)
    ("bad/alias-bomb.yaml", 0, None, "more than 100000 YAML nodes"),
    ("bad/big.yaml", None, None, "1100000 bytes, more than the limit of 1048576"),
    ("bad/broken.yaml", 1, None, "invalid YAML at line 10"),
    ("bad/cluster-scoped.yaml", 0, "kind", "Namespace is cluster-scoped"),
    ("bad/deep.yaml", 0, None, "nests deeper than 64 levels"),
    (
        "bad/deployment.yaml",
        0,
        "kind",
        "Deployment.apps is not exported to this App Cluster; "
        "exported kinds: PostgresqlInstance.anynines.com, ServiceBinding.anynines.com",
    ),
    ("bad/latin1.yaml", None, None, "not UTF-8 text: byte 0xe9 at line 3"),
    ("bad/linked-folder", None, None, "symlink leaves the repository"),
    ("bad/list.yaml", 0, None, "the document is a list, not a Kubernetes object"),
    ("bad/many.yaml", None, None, "more than 1000 YAML documents"),
    ("bad/no-kind.yaml", 0, "kind", "kind is missing"),
    ("bad/no-name.yaml", 0, "metadata.name", "metadata.name is missing"),
    ("bad/no-namespace.yaml", 0, "metadata.namespace", "metadata.namespace is missing"),
    (
        "bad/other-namespace.yaml",
        0,
        "metadata.namespace",
        "namespace 'team-z' is not allowed for this repository; allowed: team-a, team-b",
    ),
    ("bad/outside.yaml", None, None, "symlink leaves the repository"),
    (
        "bad/schema.yaml",
        0,
        "spec.parameters.maxConnections",
        'spec.parameters.maxConnections must be an integer, got string "many"',
    ),
    ("bad/schema.yaml", 1, "spec.plan", 'got "postgresql-single-tiny" (did you mean'),
    ("bad/schema.yaml", 2, "spec.plan", "spec.plan is required"),
    ("bad/schema.yaml", 3, "spec.sizee", "unknown field spec.sizee"),
    ("bad/secret.yaml", 0, "kind", "Secrets never belong in Git"),
    (
        "bad/typo-group.yaml",
        0,
        "apiVersion",
        "PostgresqlInstance.anynines.io is not exported; "
        "PostgresqlInstance is exported as PostgresqlInstance.anynines.com",
    ),
    (
        "bad/typo-kind.yaml",
        0,
        "kind",
        "PostgressqlInstance.anynines.com is not exported to this App Cluster; exported kinds: "
        "PostgresqlInstance.anynines.com, ServiceBinding.anynines.com; did you mean "
        "PostgresqlInstance.anynines.com?",
    ),
    (
        "bad/v2.yaml",
        0,
        "apiVersion",
        "anynines.com/v2 is not served for PostgresqlInstance.anynines.com; served: "
        "anynines.com/v1",
    ),
    (
        "zz-copy.yaml",
        0,
        "metadata.name",
        "PostgresqlInstance.anynines.com team-a/main is already "
        "defined in apps/good.yaml:1 (document 1)",
    ),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tree")
    root = base / "repo"
    for name, content in TREE.items():
        write(root, name, content)
    write(base, "outside/claim.yaml", documents(postgres("smuggled")))
    (root / "bad/outside.yaml").symlink_to(base / "outside/claim.yaml")
    (root / "bad/linked-folder").symlink_to(base / "outside", target_is_directory=True)
    (root / "apps/team-b").symlink_to(root / "team-b", target_is_directory=True)  # skipped
    return root


@pytest.fixture(scope="module")
def loaded(tree: Path) -> DesiredState:
    return load(tree)


def test_good_claims_still_load_beside_bad_ones(loaded: DesiredState) -> None:
    assert [(str(c.identity), c.location) for c in loaded.claims] == [
        ("PostgresqlInstance.anynines.com team-a/main", Location("apps/good.yaml", 0, 1)),
        ("ServiceBinding.anynines.com team-a/main-binding", Location("apps/good.yaml", 1, 20)),
        ("PostgresqlInstance.anynines.com team-a/schema-ok", Location("bad/schema.yaml", 4, 39)),
        ("PostgresqlInstance.anynines.com team-b/after-secret", Location("bad/secret.yaml", 1, 9)),
        ("PostgresqlInstance.anynines.com team-b/orders", Location("team-b/db.yml", 0, 1)),
    ]
    assert loaded.claims[0].body["spec"]["plan"] == "postgresql-single-small"  # first one wins


@pytest.mark.parametrize(
    ("file", "document", "field", "message"), EXPECTED, ids=[f"{e[0]}:{e[1]}" for e in EXPECTED]
)
def test_bad_input_is_refused_with_file_document_field_and_fix(
    loaded: DesiredState, file: str, document: int | None, field: str | None, message: str
) -> None:
    (rejection,) = [r for r in loaded.rejections if (r.file, r.document) == (file, document)]
    assert rejection.field == field
    assert message in rejection.message
    assert rejection.fix


def test_nothing_else_is_refused(loaded: DesiredState) -> None:
    assert [(r.file, r.document, r.field) for r in loaded.rejections] == [
        (file, document, field) for file, document, field, _ in EXPECTED
    ]


def test_fixes_say_what_to_do(loaded: DesiredState) -> None:
    fixes = {(r.file, r.document): r.fix for r in loaded.rejections}
    assert "ServiceBinding" in fixes[("bad/secret.yaml", 0)]
    assert "team-a, team-b" in fixes[("bad/no-namespace.yaml", 0)]
    assert "Set apiVersion to anynines.com/v1" in fixes[("bad/v2.yaml", 0)]
    assert "kubectl explain postgresqlinstances.spec" in fixes[("bad/schema.yaml", 3)]
    assert "apps/good.yaml" in fixes[("zz-copy.yaml", 0)]


def test_loading_is_deterministic(tree: Path, loaded: DesiredState) -> None:
    assert load(tree) == loaded


def test_claim_body_drops_status_and_server_owned_metadata(tmp_path: Path) -> None:
    obj = postgres("db")
    obj["metadata"].update(
        labels={"app": "shop"},
        annotations={"team": "a"},
        resourceVersion="42",
        uid="0b6f",
        creationTimestamp="2024-05-01T10:00:00Z",
        generation=3,
        managedFields=[{"manager": "kubectl"}],
        selfLink="/apis/x",
        deletionTimestamp="2024-05-02T10:00:00Z",
    )
    obj["status"] = {"conditions": []}
    write(tmp_path, "db.yaml", documents(obj))
    (claim,) = load(tmp_path).claims
    assert claim.identity == Identity("anynines.com", "PostgresqlInstance", "team-a", "db")
    assert claim.api_version == "anynines.com/v1"
    assert claim.body == {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": "db",
            "namespace": "team-a",
            "labels": {"app": "shop"},
            "annotations": {"team": "a"},
        },
        "spec": obj["spec"],
    }


def test_multi_document_files_give_indexes_and_lines(tmp_path: Path) -> None:
    text = (
        "# claims of team a\n"
        "---\n"
        "apiVersion: anynines.com/v1\n"  # line 3
        "kind: ServiceBinding\n"
        "metadata: {name: one, namespace: team-a}\n"
        "spec: {instanceRef: main, serviceInstanceType: postgresql}\n"
        "---\n"
        "---\n"  # an empty document: skipped, but counted
        "# the second binding\n"
        "apiVersion: anynines.com/v1\n"  # line 10
        "kind: ServiceBinding\n"
        "metadata: {name: two, namespace: team-a}\n"
        "spec: {instanceRef: main, serviceInstanceType: mysql}\n"
    )
    write(tmp_path, "bindings.yaml", text)
    result = load(tmp_path)
    assert [c.location for c in result.claims] == [Location("bindings.yaml", 0, 3)]
    (rejection,) = result.rejections
    assert (rejection.document, rejection.field) == (2, "spec.serviceInstanceType")


def test_claims_are_sorted_by_file_and_document(tmp_path: Path) -> None:
    for number, name in enumerate(("b.yaml", "a/z.yaml", "a.yaml", "a/b/c.yml")):
        write(tmp_path, name, documents(postgres(f"db{number}a"), postgres(f"db{number}b")))
    files = [(c.location.file, c.location.document) for c in load(tmp_path).claims]
    assert files == sorted(files)
    assert files[0] == ("a.yaml", 0)
    assert len(files) == 8


def test_a_folder_of_the_repository_can_be_bound(tmp_path: Path) -> None:
    write(tmp_path, "deploy/prod/db.yaml", documents(postgres("prod")))
    write(tmp_path, "deploy/staging/db.yaml", documents(postgres("staging")))
    names = [c.identity.name for c in load(tmp_path, "deploy/prod").claims]
    assert names == ["prod"]
    assert load(tmp_path, "./deploy/prod/") == load(tmp_path, "deploy/prod")
    assert load(tmp_path, ".") == load(tmp_path, "")
    assert [c.identity.name for c in load(tmp_path, "").claims] == ["prod", "staging"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing", "the folder missing does not exist in the repository"),
        ("../elsewhere", "the path ../elsewhere leaves the repository"),
        ("/etc", "the path /etc leaves the repository"),
        ("a\0b", "is not a valid folder name"),
    ],
)
def test_a_bad_path_is_one_rejection(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "elsewhere").mkdir()
    result = load(tmp_path / "repo", path)
    assert result.claims == ()
    (rejection,) = result.rejections
    assert message in rejection.message
    assert rejection.document is None


def test_any_namespace_when_none_are_listed(tmp_path: Path) -> None:
    write(tmp_path, "db.yaml", documents(postgres("db", "anything")))
    assert len(load(tmp_path, allowed=None).claims) == 1
    result = load(tmp_path, allowed=frozenset())
    assert "allowed: none" in result.rejections[0].message


@pytest.mark.parametrize(
    ("obj", "field", "message"),
    [
        ("just text", None, "the document is a string, not a Kubernetes object"),
        ({"kind": "X"}, "apiVersion", "apiVersion is missing"),
        ({**postgres("x"), "apiVersion": 1}, "apiVersion", "apiVersion must be text, not int 1"),
        (
            {**postgres("x"), "apiVersion": "a/b/c"},
            "apiVersion",
            "'a/b/c' is not <group>/<version>",
        ),
        (
            {**postgres("x"), "metadata": ["x"]},
            "metadata",
            "metadata must be a mapping, not a list",
        ),
        (
            {**postgres("x"), "metadata": {"generateName": "db-", "namespace": "team-a"}},
            "metadata.name",
            "generateName is not supported",
        ),
        (postgres("My_DB"), "metadata.name", "metadata.name 'My_DB' is not a valid object name"),
        (postgres("db", "Team A"), "metadata.namespace", "'Team A' is not a valid namespace name"),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "admin"},
            },
            "kind",
            "ClusterRole.rbac.authorization.k8s.io is cluster-scoped",
        ),
    ],
)
def test_document_problems(tmp_path: Path, obj: Any, field: str | None, message: str) -> None:
    write(tmp_path, "doc.yaml", documents(obj, postgres("good")))
    result = load(tmp_path)
    (rejection,) = result.rejections
    assert (rejection.file, rejection.document, rejection.field) == ("doc.yaml", 0, field)
    assert message in rejection.message
    assert [c.identity.name for c in result.claims] == ["good"]


def test_a_cluster_scoped_export_is_refused(tmp_path: Path) -> None:
    cluster = Export("anynines.com", "Plan", "plans", "Cluster", {"v1": {}})
    write(
        tmp_path,
        "plan.yaml",
        documents(
            {
                "apiVersion": "anynines.com/v1",
                "kind": "Plan",
                "metadata": {"name": "x", "namespace": "team-a"},
            }
        ),
    )
    (rejection,) = load_desired(tmp_path, "", {("anynines.com", "Plan"): cluster}).rejections
    assert rejection.field == "kind"
    assert "Plan.anynines.com is cluster-scoped" in rejection.message


def test_a_duplicate_in_the_same_file_keeps_the_first(tmp_path: Path) -> None:
    write(
        tmp_path,
        "db.yaml",
        documents(postgres("db"), postgres("db", plan="postgresql-single-nano")),
    )
    result = load(tmp_path)
    (claim,) = result.claims
    assert claim.location.document == 0
    (rejection,) = result.rejections
    assert (rejection.document, rejection.field) == (1, "metadata.name")
    assert "already defined in db.yaml:1 (document 1)" in rejection.message


def test_namespace_and_schema_problems_are_reported_together(tmp_path: Path) -> None:
    write(tmp_path, "db.yaml", documents(postgres("db", "team-z", plan="big", sizee=1)))
    fields = [r.field for r in load(tmp_path).rejections]
    assert fields == ["metadata.namespace", "spec.plan", "spec.sizee"]


def test_symlinks_inside_the_repository(tmp_path: Path) -> None:
    write(tmp_path, "shared/db.yaml", documents(postgres("shared")))
    write(tmp_path, ".git/HEAD.yaml", "ref: refs/heads/main\n")
    write(tmp_path, "apps/real.yaml", documents(postgres("real")))
    (tmp_path / "apps/db.yaml").symlink_to("../shared/db.yaml")
    (tmp_path / "apps/shared").symlink_to("../shared", target_is_directory=True)
    (tmp_path / "apps/gone.yaml").symlink_to("../shared/missing.yaml")
    (tmp_path / "apps/head.yaml").symlink_to("../.git/HEAD.yaml")
    result = load(tmp_path, "apps")
    assert [(c.identity.name, c.location.file) for c in result.claims] == [
        ("shared", "apps/db.yaml"),
        ("real", "apps/real.yaml"),
    ]
    assert [(r.file, r.message) for r in result.rejections] == [
        ("apps/gone.yaml", "symlink points to a file that does not exist"),
        ("apps/head.yaml", "symlink points into .git or .klutch, which are never read"),
    ]


def test_limits_can_be_lowered(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", documents(postgres("one")))
    write(tmp_path, "three.yaml", documents(*(postgres(f"db{i}") for i in range(3))))
    result = load(tmp_path, limits=Limits(max_file_bytes=300, max_documents=2))
    assert [c.identity.name for c in result.claims] == ["one"]
    assert [(r.file, r.document) for r in result.rejections] == [("three.yaml", None)]


def test_schemas_are_compiled_once_per_kind_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[Any] = []

    class Counting(claim_rules.CompiledSchema):
        def __init__(self, schema: Any) -> None:
            compiled.append(schema)
            super().__init__(schema)

    monkeypatch.setattr(claim_rules, "CompiledSchema", Counting)
    objects = [postgres(f"db{i}") for i in range(40)] + [binding(f"b{i}") for i in range(40)]
    write(tmp_path, "many.yaml", documents(*objects))
    assert len(load(tmp_path).claims) == 80
    assert compiled == [POSTGRES_SCHEMA, BINDING_SCHEMA]


def test_an_export_schema_that_cannot_compile_leaves_checks_to_the_control_plane(
    tmp_path: Path,
) -> None:
    broken = Export(
        "anynines.com",
        "PostgresqlInstance",
        "postgresqlinstances",
        "Namespaced",
        {"v1": {"type": "object", "properties": {"spec": {"type": "dict"}}}},
    )
    write(tmp_path, "db.yaml", documents(postgres("db")))
    result = load_desired(tmp_path, "", {("anynines.com", "PostgresqlInstance"): broken})
    assert len(result.claims) == 1
    assert result.rejections == ()


def test_empty_files_and_documents_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, "empty.yaml", "")
    write(tmp_path, "comments.yaml", "# nothing yet\n---\n---\n")
    assert load(tmp_path) == DesiredState((), ())


def test_unreadable_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "locked.yaml", documents(postgres("locked")))
    write(tmp_path, "open.yaml", documents(postgres("open")))
    real_open = Path.open

    def guarded_open(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.name == "locked.yaml":
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded_open)
    result = load(tmp_path)
    assert [c.identity.name for c in result.claims] == ["open"]
    assert result.rejections == (
        Rejection(
            "locked.yaml",
            "cannot read the file: Permission denied",
            "Check the file's permissions.",
        ),
    )


def test_a_single_file_can_be_bound(tmp_path: Path) -> None:
    write(tmp_path, "deploy/db.yaml", documents(postgres("db")))
    write(tmp_path, "deploy/other.yaml", documents(postgres("other")))
    assert [c.location.file for c in load(tmp_path, "deploy/db.yaml").claims] == ["deploy/db.yaml"]


def test_special_files_are_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    write(tmp_path, "db.yaml", documents(postgres("db")))
    assert len(load(tmp_path).claims) == 1
    (rejection,) = load(tmp_path, "pipe.yaml").rejections
    assert rejection.message.startswith("cannot read the folder")


# The Crossplane claim fields of a claim CRD that Crossplane generates from an XRD (v1.20
# internal/xcrd/schemas.go, CompositeResourceClaimSpecProps): the schema accepts them all.
CROSSPLANE_CLAIM_FIELDS = {
    "compositionRef": {"type": "object", "properties": {"name": STRING}},
    "compositionSelector": {"type": "object", "properties": {"matchLabels": {"type": "object"}}},
    "compositionRevisionRef": {"type": "object", "properties": {"name": STRING}},
    "compositionRevisionSelector": {
        "type": "object",
        "properties": {"matchLabels": {"type": "object"}},
    },
    "resourceRef": {
        "type": "object",
        "properties": {"apiVersion": STRING, "kind": STRING, "name": STRING},
    },
    "publishConnectionDetailsTo": {
        "type": "object",
        "properties": {"name": STRING, "configRef": {"type": "object"}},
    },
    "writeConnectionSecretToRef": {"type": "object", "properties": {"name": STRING}},
}
CLAIM_SCHEMA = {
    **POSTGRES_SCHEMA,
    "properties": {
        **POSTGRES_SCHEMA["properties"],
        "spec": {
            **POSTGRES_SCHEMA["properties"]["spec"],
            "properties": {
                **POSTGRES_SCHEMA["properties"]["spec"]["properties"],
                **CROSSPLANE_CLAIM_FIELDS,
            },
        },
    },
}
CLAIM_EXPORTS = {
    ("anynines.com", "PostgresqlInstance"): Export(
        "anynines.com",
        "PostgresqlInstance",
        "postgresqlinstances",
        "Namespaced",
        {"v1": CLAIM_SCHEMA},
    )
}
VICTIM_XR = {"apiVersion": "anynines.com/v1", "kind": "XPostgresqlInstance", "name": "orders-x7k2p"}


@pytest.mark.parametrize(
    ("spec", "field", "message", "fix"),
    [
        (
            {"resourceRef": VICTIM_XR},
            "spec.resourceRef",
            "could take over another tenant's or the platform's",
            "Remove spec.resourceRef",
        ),
        (
            {"compositionRevisionRef": {"name": "local-postgresql-0a1b2c3"}},
            "spec.compositionRevisionRef",
            "the platform team rolls out Composition revisions",
            "Remove spec.compositionRevisionRef; choose the backend with spec.compositionRef.name",
        ),
        (
            {"compositionRevisionSelector": {"matchLabels": {"channel": "old"}}},
            "spec.compositionRevisionSelector",
            "the platform team rolls out Composition revisions",
            "Remove spec.compositionRevisionSelector",
        ),
        (
            {"publishConnectionDetailsTo": {"name": "orders", "configRef": {"name": "vault"}}},
            "spec.publishConnectionDetailsTo",
            "names one of the platform's secret stores",
            "Remove spec.publishConnectionDetailsTo",
        ),
    ],
)
def test_crossplane_references_are_refused_per_document(
    tmp_path: Path, spec: dict[str, Any], field: str, message: str, fix: str
) -> None:
    """Each is refused in its own document, naming file, document and field; the rest loads and
    the refused claim's identity is kept, so pruning spares the live object."""
    write(tmp_path, "db.yaml", documents(postgres("good"), postgres("attack", **spec)))
    result = load_desired(tmp_path, "", CLAIM_EXPORTS, ALLOWED)
    (rejection,) = result.rejections
    assert (rejection.file, rejection.document, rejection.field) == ("db.yaml", 1, field)
    assert message in rejection.message
    assert rejection.fix.startswith(fix)
    assert rejection.identity == Identity("anynines.com", "PostgresqlInstance", "team-a", "attack")
    assert [c.identity.name for c in result.claims] == ["good"]


def test_every_crossplane_reference_in_one_claim_is_named(tmp_path: Path) -> None:
    claim = postgres(
        "attack",
        resourceRef=VICTIM_XR,
        compositionRevisionRef={"name": "r"},
        compositionRevisionSelector={"matchLabels": {"a": "b"}},
        publishConnectionDetailsTo={"name": "x"},
    )
    write(tmp_path, "db.yaml", documents(claim))
    fields = sorted(r.field for r in load_desired(tmp_path, "", CLAIM_EXPORTS).rejections)
    assert fields == [
        "spec.compositionRevisionRef",
        "spec.compositionRevisionSelector",
        "spec.publishConnectionDetailsTo",
        "spec.resourceRef",
    ]


def test_the_backend_choice_and_the_claims_own_secret_stay_allowed(tmp_path: Path) -> None:
    """compositionRef/compositionSelector pick among the Compositions of the claim's own
    composite kind (Crossplane checks compositeTypeRef); writeConnectionSecretToRef is a name
    in the claim's namespace. A namespace in it is an unknown field of the claim CRD."""
    write(
        tmp_path,
        "db.yaml",
        documents(
            postgres(
                "chosen",
                compositionRef={"name": "a9s-postgresql"},
                writeConnectionSecretToRef={"name": "chosen-conn"},
            ),
            postgres("selected", compositionSelector={"matchLabels": {"backend": "a9s"}}),
            postgres(
                "elsewhere",
                writeConnectionSecretToRef={"name": "creds", "namespace": "victim"},
            ),
        ),
    )
    result = load_desired(tmp_path, "", CLAIM_EXPORTS)
    assert [c.identity.name for c in result.claims] == ["chosen", "selected"]
    (rejection,) = result.rejections
    assert (rejection.document, rejection.field) == (2, "spec.writeConnectionSecretToRef.namespace")
