"""A Crossplane-style provider, in Python, for the local stack's PostgreSQL server.

Real Klutch backends (a8s, a9s) cannot run here, so Compositions for the local stack compose these
managed resources, which act on a real server: LocalDatabase, LocalUser (credentials with a9s's
keys), LocalBackup (``pg_dump``) and LocalRestore (``pg_restore``). Each is served cluster-scoped
(group ``postgresql.local.klutch.anynines.com``, configured by a ProviderConfig) and namespaced as
Crossplane 2 providers serve theirs (``postgresql.m.local.klutch.anynines.com``, configured by a
ClusterProviderConfig or a ProviderConfig of the namespace). They follow Crossplane's
managed-resource conventions (``forProvider``, ``atProvider``, ``providerConfigRef``,
``writeConnectionSecretToRef``, ``deletionPolicy`` or ``managementPolicies``, the Ready and Synced
conditions, the external name annotation, a finalizer), so Crossplane composes and reports them
like any provider's.

One small reconciler per kind decides with pure functions and acts through a thin I/O layer:
``managed`` (the lifecycle every kind shares), ``database``, ``user``, ``backup``, ``restore``,
``providerconfig`` (usage tracking), ``provider`` (the process), ``crds`` (the namespaced CRDs,
generated from the cluster-scoped ones). CRDs: ``catalog/provider/``.
"""
