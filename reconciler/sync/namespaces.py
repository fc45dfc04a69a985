"""Stage: the Control Plane namespace of every App namespace a repository may use.

Klutch maps each App namespace of a consumer to a Control Plane namespace when asked with an
APIServiceNamespace; the mapping arrives in its status, possibly a pass or more later.
"""

from __future__ import annotations

from reconciler.sync.view import View


def map_namespaces(view: View, app_namespaces: tuple[str, ...]) -> bool:
    """Ask for every allowed App namespace's Control Plane namespace; True while pending."""
    pending = False
    for namespace in app_namespaces:
        if namespace in view.mapping:
            continue
        mapping = view.namespace_mapping(namespace)
        if mapping is None:
            view.request_namespace_mapping(namespace)
        target = ((mapping or {}).get("status") or {}).get("namespace")
        if not target:
            pending = True
            continue
        view.map_namespace(namespace, target)
    view.watch_mapped_claims()
    return pending
