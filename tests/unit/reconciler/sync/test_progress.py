"""Progress in App generations (issue 16, defect 5): the pure decisions of
reconciler/sync/progress.py and the observe stage writing them, against the claim schemas
Crossplane generates: 2.x declares ``status.conditions[].observedGeneration``
(crossplane-runtime v2.4.0 pkg/xcrd/schemas.go ``CompositeResourceStatusProps``), 1.20 does
not (crossplane v1.20.13 internal/xcrd/schemas.go), and neither declares a top-level one of
its own; both copy an XRD's ``status`` properties into the claim CRD (crossplane v1.20.13
internal/xcrd/crd.go ``genCrdVersion``: ``maps.Copy(cStatus.Properties, xStatus.Properties)``),
so the catalog's XRDs, which declare ``observedGeneration``, give both lines a top-level one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reconciler.manifests import Export
from reconciler.sync import objects, progress
from reconciler.sync.desired import DesiredState
from reconciler.sync.observe import observe
from tests.unit.reconciler.sync.fakeview import FakeView
from tests.unit.reconciler.sync.test_sync_stages import (
    APP_NS,
    CP_NS,
    GROUP,
    KIND,
    PLURAL,
    REPO,
    claim,
    ours,
)

pytestmark = pytest.mark.unit

CONDITION_PROPS = {
    "lastTransitionTime": {"type": "string", "format": "date-time"},
    "message": {"type": "string"},
    "reason": {"type": "string"},
    "status": {"type": "string"},
    "type": {"type": "string"},
}


def claim_schema(condition_props: dict, xrd_status: dict | None = None) -> dict:
    """A claim CRD's schema as Crossplane generates its status part, with an XRD's status
    properties merged in."""
    conditions = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {"type": "object", "properties": condition_props},
    }
    status = {"type": "object", "properties": {**(xrd_status or {}), "conditions": conditions}}
    return {"type": "object", "properties": {"spec": {"type": "object"}, "status": status}}


V1_20 = claim_schema(CONDITION_PROPS)
V2 = claim_schema({**CONDITION_PROPS, "observedGeneration": {"type": "integer"}})
TOP = {"observedGeneration": {"type": "integer", "format": "int64"}}
V1_20_CATALOG = claim_schema(CONDITION_PROPS, TOP)
V2_CATALOG = claim_schema({**CONDITION_PROPS, "observedGeneration": {"type": "integer"}}, TOP)
XRDS = Path(__file__).resolve().parents[4] / "catalog" / "xrds"


def app(generation: int, ready_observed: int | None = None) -> dict:
    ready = {"type": "Ready", "status": "True"}
    if ready_observed is not None:
        ready["observedGeneration"] = ready_observed
    return {"metadata": {"generation": generation}, "status": {"conditions": [ready]}}


def copy(generation: int, synced_observed: int | None = None) -> dict:
    synced = {"type": "Synced", "status": "True"}
    if synced_observed is not None:
        synced["observedGeneration"] = synced_observed
    ready = {"type": "Ready", "status": "True"}
    return {"metadata": {"generation": generation}, "status": {"conditions": [ready, synced]}}


def by_type(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions") or []}


def test_which_schemas_let_conditions_carry_a_generation() -> None:
    assert progress.conditions_take_generation(V2)
    assert not progress.conditions_take_generation(V1_20)
    assert not progress.conditions_take_generation({})
    preserved = {"properties": {"status": {"x-kubernetes-preserve-unknown-fields": True}}}
    assert progress.conditions_take_generation(preserved)


def test_the_app_generation_is_observed_once_the_copy_has_its_spec_and_status() -> None:
    # a copy whose conditions carry no generation (1.20): its spec is all there is to go by
    assert progress.observed_generation(copy(4), app(2, 1), in_sync=True) == 2
    # the copy has the spec, its controller says it observed it
    assert progress.observed_generation(copy(4, 4), app(2, 1), in_sync=True) == 2


def test_an_unconfirmed_change_keeps_the_live_conditions_value() -> None:
    assert progress.observed_generation(copy(4), app(2, 1), in_sync=False) == 1
    assert progress.observed_generation(copy(4, 3), app(2, 1), in_sync=True) == 1
    assert progress.observed_generation({"metadata": {"generation": 4}}, app(2, 1), True) == 1
    # nothing said before: the generation before, so the change is in progress
    assert progress.observed_generation(copy(4), app(3), in_sync=False) == 2
    # the previous value is the same condition's
    assert progress.observed_generation(copy(4), app(3, 2), False, progress.SYNCED) == 2


def test_the_top_level_generation_is_written_only_where_the_schema_declares_it() -> None:
    upstream = copy(9)
    upstream["status"]["observedGeneration"] = 9  # the copy's own generations: never ours
    for in_sync in (True, False):
        for stamps in (True, False):
            status = progress.app_generations(
                upstream["status"], upstream, app(2, 1), in_sync, stamps
            )
            assert "observedGeneration" not in status
    assert upstream["status"]["observedGeneration"] == 9  # the cache is never changed


def test_which_schemas_declare_a_top_level_generation() -> None:
    assert progress.status_takes_generation(V1_20_CATALOG)
    assert progress.status_takes_generation(V2_CATALOG)
    assert not progress.status_takes_generation(V1_20)
    assert not progress.status_takes_generation(V2)
    assert not progress.status_takes_generation({})
    preserved = {"properties": {"status": {"x-kubernetes-preserve-unknown-fields": True}}}
    assert progress.status_takes_generation(preserved)


@pytest.mark.parametrize("path", sorted(XRDS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_catalog_xrd_gives_its_claims_a_top_level_generation(path: Path) -> None:
    xrd = yaml.safe_load(path.read_text())
    for version in xrd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        assert status["observedGeneration"]["type"] == "integer", (path.name, version["name"])
        assert status["observedGeneration"]["format"] == "int64"
        assert progress.status_takes_generation(claim_schema(CONDITION_PROPS, status))


def test_the_top_level_generation_follows_the_conditions_rules() -> None:
    in_sync = progress.app_generations(copy(4)["status"], copy(4), app(2, 1), True, top=True)
    assert in_sync["observedGeneration"] == 2  # 1.20: the copy has the spec, nothing else tells
    assert "observedGeneration" not in by_type(in_sync)["Ready"]  # conditions: not declared
    behind = copy(4, synced_observed=3)  # the provider has not observed the copy's spec yet
    stale = progress.app_generations(behind["status"], behind, app(2), True, top=True)
    assert stale["observedGeneration"] == 1
    live = app(3, ready_observed=1)
    live["status"]["observedGeneration"] = 2  # the previous value is the top-level one
    kept = progress.app_generations(copy(4)["status"], copy(4), live, False, top=True)
    assert kept["observedGeneration"] == 2
    fresh = progress.app_generations(copy(4)["status"], copy(4), app(3, 3), False, top=True)
    assert fresh["observedGeneration"] == 2  # nothing said before: the generation before


def test_stamps_ready_and_synced_only_where_the_schema_declares_it() -> None:
    upstream = copy(4)
    upstream["status"]["conditions"].append({"type": "Other", "status": "True"})
    stamped = by_type(progress.app_generations(upstream["status"], upstream, app(2), True, True))
    assert stamped["Ready"]["observedGeneration"] == 2
    assert stamped["Synced"]["observedGeneration"] == 2
    assert "observedGeneration" not in stamped["Other"]
    plain = progress.app_generations(upstream["status"], upstream, app(2), True, False)
    assert plain == upstream["status"]


def test_provider_stamped_conditions_are_translated_into_app_generations() -> None:
    upstream = copy(1, synced_observed=1)  # a recreated copy starts again at 1
    current = by_type(progress.app_generations(upstream["status"], upstream, app(5), True))
    assert current["Synced"]["observedGeneration"] == 5
    behind = by_type(progress.app_generations(upstream["status"], upstream, app(5), False))
    assert behind["Synced"]["observedGeneration"] == 4
    older = copy(3, synced_observed=2)  # the provider has not observed the copy's spec yet
    stale = by_type(progress.app_generations(older["status"], older, app(5), True))
    assert stale["Synced"]["observedGeneration"] == 4


@pytest.mark.parametrize(
    ("schema", "stamped", "top"),
    [
        (V2, True, False),
        (V1_20, False, False),
        (V2_CATALOG, True, True),
        (V1_20_CATALOG, False, True),
    ],
)
def test_observe_stamps_by_the_exports_schema(schema: dict, stamped: bool, top: bool) -> None:
    view = FakeView([Export(GROUP, KIND, PLURAL, schemas={"v1": schema})], REPO)
    view.mapping[APP_NS] = CP_NS
    db = claim("db")
    view.put_app(ours("db", uid="u-db", generation=3))
    upstream = objects.control_plane_object(db, CP_NS)
    upstream["metadata"]["generation"] = 1
    upstream["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "A"}]}
    view.put_cp(upstream)
    observe(view, DesiredState((db,), ()), (db,), REPO)
    status = view.app[(KIND, APP_NS, "db")]["status"]
    assert status.get("observedGeneration") == (3 if top else None)
    ready = by_type(status)["Ready"]
    assert ready.get("observedGeneration") == (3 if stamped else None)
