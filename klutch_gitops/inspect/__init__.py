"""``klutch-gitops get``, ``reconcile``, ``suspend`` and ``resume``: reading and steering
RepositoryBindings on the Control Plane and claims on the App Cluster, as kubectl would."""
