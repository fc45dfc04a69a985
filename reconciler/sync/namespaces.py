"""Stage: the Control Plane namespace of every App namespace a repository may use.

Klutch maps each App namespace of a consumer to a Control Plane namespace when asked with an
APIServiceNamespace; the mapping arrives in its status, usually a fraction of a second later
(reconciler/controllers/namespaces.py writes it). A pass that has just asked waits a bounded
moment for it, so a cold sync writes both clusters in one pass instead of writing the App Cluster,
re-queueing itself and writing the Control Plane in a second pass.
"""

from __future__ import annotations

import time
from typing import Any

from reconciler.sync.view import View

# How long a pass that has just asked for a mapping waits for it: the namespace controller
# answers in well under a second; after this the pass goes on with the mapping pending.
MAPPING_WAIT_SECONDS = 2.0
MAPPING_POLL_SECONDS = 0.05  # one GET per namespace still waited for, this often


def map_namespaces(view: View, app_namespaces: tuple[str, ...], wait: float | None = None) -> bool:
    """Ask for every allowed App namespace's Control Plane namespace; True while pending.

    ``wait`` (default ``MAPPING_WAIT_SECONDS``): for the namespaces asked for in this call, look
    again for up to this long before calling them pending. A namespace asked for earlier and
    still unmapped is not waited for: a controller that does not answer costs later passes
    nothing."""
    asked: list[str] = []
    for namespace in app_namespaces:
        if namespace in view.mapping:
            continue
        mapping = view.namespace_mapping(namespace)
        if mapping is None:
            view.request_namespace_mapping(namespace)
            asked.append(namespace)
        else:
            record_mapping(view, namespace, mapping)
    if asked:
        await_mappings(view, asked, MAPPING_WAIT_SECONDS if wait is None else wait)
    view.watch_mapped_claims()
    return any(namespace not in view.mapping for namespace in app_namespaces)


def record_mapping(view: View, namespace: str, mapping: dict[str, Any] | None) -> bool:
    """Record the mapping if its status names the Control Plane namespace; whether it did."""
    target = ((mapping or {}).get("status") or {}).get("namespace")
    if target:
        view.map_namespace(namespace, target)
    return bool(target)


def await_mappings(view: View, namespaces: list[str], wait: float) -> None:
    """Poll the namespaces' APIServiceNamespaces until each is mapped or ``wait`` has passed."""
    deadline = time.monotonic() + wait
    waiting = list(namespaces)
    while waiting and time.monotonic() < deadline:
        time.sleep(MAPPING_POLL_SECONDS)
        waiting = [n for n in waiting if not record_mapping(view, n, view.namespace_mapping(n))]
