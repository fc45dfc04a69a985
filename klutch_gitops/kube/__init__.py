"""Kubernetes plumbing both wings share: the API client, informers, CRDs, the work queue,
kstatus conditions."""
