"""One test kit for tests/ and bench/: Git repositories of claims as a person keeps them, tenants
bound on the Control Plane with a reconciler that follows their repository, waiting for what the
reconciler does, and checks of the end state in Git and in both clusters.

``wait`` (eventually), ``git`` (remotes, a person's clone, the history), ``claims`` (claim text,
provider status, claims in Git and live), ``tenant`` (make_tenant and what reads a tenant's state),
``flux`` (the real Flux beside the reconciler, for the peers tests and the benchmark). Under tests/,
so no wheel carries it.
"""
