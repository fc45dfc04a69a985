"""A test's tier is the first folder under tests/, however deep the file sits: tests/unit mirrors
the code in sub-folders, and a sub-folder named like a tier changes nothing."""

from __future__ import annotations

import pytest

from tests.conftest import OPT_IN_TIERS, TESTS, tier_of


@pytest.mark.parametrize(
    ("path", "tier"),
    [
        ("unit/test_x.py", "unit"),
        ("unit/reconciler/sync/test_x.py", "unit"),
        ("unit/klutch_gitops/kube/test_x.py", "unit"),
        ("integration/test_x.py", "integration"),
        ("integration/unit/test_x.py", "integration"),
        ("security/test_x.py", "security"),
        ("chaos/test_x.py", "chaos"),
        ("kind/test_x.py", "kind"),
        ("runtimes/test_x.py", "runtimes"),
    ],
)
def test_the_first_folder_under_tests_is_the_tier(path: str, tier: str) -> None:
    assert tier_of(TESTS / path) == tier


@pytest.mark.parametrize("path", ["peers/test_x.py", "peers/unit/test_x.py", "test_x.py"])
def test_a_file_outside_every_tier_folder_has_none(path: str) -> None:
    assert tier_of(TESTS / path) is None


def test_a_file_outside_tests_has_none() -> None:
    assert tier_of(TESTS.parent / "unit" / "test_x.py") is None


def test_kind_and_runtimes_are_opt_in_wherever_their_files_sit() -> None:
    assert tier_of(TESTS / "kind" / "deep" / "test_x.py") in OPT_IN_TIERS
    assert tier_of(TESTS / "runtimes" / "test_x.py") in OPT_IN_TIERS
    assert tier_of(TESTS / "unit" / "kind" / "test_x.py") not in OPT_IN_TIERS
