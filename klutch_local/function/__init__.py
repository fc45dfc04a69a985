"""function-klutch-local: the local backend's composition function.

Crossplane 2 composes only through function pipelines, and no function package can be pulled on
this machine, so the local stack serves its own function out of cluster (``python -m
klutch_local.function``) and registers it with a FunctionRevision (localstack/crossplane.py).
``composers`` holds what is composed (pure, unit-tested); ``server`` the gRPC layer around it.
"""
