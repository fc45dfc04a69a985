"""The catalog's local backend: what the local-* Compositions compose on one machine.

``provider`` acts on a real PostgreSQL server (``klutch-gitops local-provider``); ``function`` is
the composition function the local stack serves out of cluster. Its own package, so the reconciler
and the bind API never load it: only ``local-provider`` and the local stack do.
"""
