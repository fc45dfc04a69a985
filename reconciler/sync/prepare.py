"""Stage: a pass's fixed costs — every exported kind served, every App namespace mapped — run
beside the loading of desired state instead of before and after it.

On a cold start these are round trips that do not depend on Git: the App CRDs are applied and
waited for until Established (``kinds``), and the APIServiceNamespaces are asked for and their
mapping waited for (``namespaces``). Loading 1,000 claim files is CPU-bound and takes about as
long, so ``preparing`` runs the round trips in one thread while the pass loads, and the pass
waits for both before it writes anything: the order of writes to the clusters is unchanged (CRDs
and mappings before claims), and an error in either is the pass's error.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, NamedTuple

from reconciler.sync import konnector
from reconciler.sync.kinds import serve_exported_kinds
from reconciler.sync.namespaces import map_namespaces
from reconciler.sync.outcome import Failed
from reconciler.sync.view import View


class Prepared(NamedTuple):
    """What the pass learnt: each export's konnector verdict, the CRDs left alone, and whether a
    namespace mapping is still pending."""

    verdicts: dict[str, konnector.Verdict]
    problems: list[Failed]
    pending: bool


def prepare(
    view: View,
    raw_exports: list[dict[str, Any]],
    path: str,
    consumer_namespace: str,
    app_namespaces: tuple[str, ...],
    wait: float | None = None,
) -> Prepared:
    """Serve the exported kinds, then map the App namespaces (waiting up to ``wait`` for a
    mapping asked for now, see ``map_namespaces``): CRDs first, as before."""
    verdicts, problems = serve_exported_kinds(view, raw_exports, path, consumer_namespace)
    pending = map_namespaces(view, app_namespaces, wait)
    return Prepared(verdicts, problems, pending)


@contextmanager
def preparing(
    view: View,
    raw_exports: list[dict[str, Any]],
    path: str,
    consumer_namespace: str,
    app_namespaces: tuple[str, ...],
    wait: float | None = None,
) -> Iterator[Future[Prepared]]:
    """``prepare`` in a thread while the block runs; leaving the block waits for it, so no write
    of it outlives the pass. Take the result after the block: ``future.result()`` re-raises."""
    with ThreadPoolExecutor(1, thread_name_prefix="prepare") as pool:
        yield pool.submit(
            prepare, view, raw_exports, path, consumer_namespace, app_namespaces, wait
        )
