"""The benchmarks' claims: numbered files of the stand-in PostgresqlInstance, and the plans an
edit moves them between."""

from __future__ import annotations

from tests.kit.claims import claim

PLANS = (
    "postgresql-single-nano",
    "postgresql-single-small",
    "postgresql-single-medium",
    "postgresql-single-big",
)


def claim_name(index: int) -> str:
    return f"db-{index:05d}"


def claim_file(index: int) -> str:
    return f"claims/{claim_name(index)}.yaml"


def claim_files(namespace: str, count: int, start: int = 0) -> dict[str, str]:
    """``count`` claim files for ``namespace`` by path, numbered from ``start``, as a
    repository's first commit (or a commit growing it) holds them."""
    return {
        claim_file(index): claim(claim_name(index), namespace)
        for index in range(start, start + count)
    }
