"""The cold sync's lower bound: a concurrent server-side-apply writer of the same N claims into
both clusters (a fresh App namespace and a fresh Control Plane namespace), ``INFLIGHT`` requests
in flight over both, with nothing else to decide: no Git, no planning, no status.

It is what the two kube-apiservers (and this machine's two cores) allow, so the reconciler's
cold sync is compared with it, not with zero. Threads over urllib3 connection pools (one
keep-alive connection per request in flight, no client-side rate limit); each apply is the PATCH
``application/apply-patch+yaml`` that kubectl and the reconciler send, the two clusters' objects
interleaved so both are written at once. urllib3, not httpx: an A/B in one process on one stack
(2 x 1000 claims, 16 in flight, two rounds, a busy machine) took 13.0-13.5 s and 6.5 s of the
writer's CPU with httpx's async client, 4.3-4.5 s and 0.8-1.0 s with urllib3 threads; the writer
shares the cores with the apiservers, so its own cost must stay small.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from itertools import chain, zip_longest

import urllib3
import yaml
from kubernetes import client

from bench.claims import claim_files
from bench.measure import BenchFailure
from tests.kit.claims import POSTGRES

# 8 at a time per cluster, as the reconciler writes eight at a time within a pass: the two
# kube-apiservers and etcd share two cores, so more in flight mostly queues (their default
# --max-mutating-requests-inflight is 200, far above) and costs the writer CPU on the same cores.
# A/B in one process on one stack (concurrent_apply at each limit, 2 x 1000 claims, two rounds)
# on a busy machine (load 30): 4 in flight 6.2-6.8 s, 8: 4.8-5.3 s, 16: 3.8-7.3 s, 32: 4.9-6.8 s,
# 64: 4.6-7.4 s, the writer's CPU 0.9-1.1 s each: 4 is too few, beyond 8 it is noise. 16 keeps
# both clusters busy when one answers slower; ``--ssa-inflight`` lets an idle run try others.
INFLIGHT = 16
MANAGER = "bench-ssa-writer"


def connection_pool(api: client.ApiClient, size: int) -> tuple[urllib3.PoolManager, str, dict]:
    """A pool with the kubeconfig's CA and client certificate, its server, and a token header
    when the kubeconfig has one."""
    config = api.configuration
    context = ssl.create_default_context(cafile=config.ssl_ca_cert)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    keys = config.api_key or {}
    headers = {"Content-Type": "application/apply-patch+yaml"}
    if token := keys.get("authorization") or keys.get("BearerToken"):
        headers["Authorization"] = token if " " in token else f"Bearer {token}"
    return urllib3.PoolManager(maxsize=size, ssl_context=context), config.host, headers


def concurrent_apply(
    apis: Mapping[str, client.ApiClient],
    namespaces: Mapping[str, str],
    n: int,
    inflight: int = INFLIGHT,
) -> tuple[float, float]:
    """Server-side apply ``n`` claims into ``namespaces[cluster]`` of each cluster in ``apis``,
    ``inflight`` requests in flight over all. Seconds from the first request to the last answer
    (an applied object exists once its apply answered), and the CPU seconds the writer's threads
    spent in their requests: near the first, the client and not the apiservers would be the
    limit."""
    pools = {cluster: connection_pool(api, inflight) for cluster, api in apis.items()}
    per_cluster = [
        [(cluster, namespace, yaml.safe_load(text)) for text in claim_files(namespace, n).values()]
        for cluster, namespace in namespaces.items()
    ]
    requests = [
        (cluster, f"{POSTGRES.path(namespace)}/{obj['metadata']['name']}", json.dumps(obj).encode())
        for cluster, namespace, obj in chain.from_iterable(zip_longest(*per_cluster))
    ]
    cpu: list[float] = []
    lock = threading.Lock()

    def apply(request: tuple[str, str, bytes]) -> None:
        cluster, path, body = request
        pool, host, headers = pools[cluster]
        started = time.thread_time()
        answer = pool.request(
            "PATCH",
            f"{host}{path}?fieldManager={MANAGER}&force=true",
            body=body,
            headers=headers,
            timeout=60,
        )
        with lock:
            cpu.append(time.thread_time() - started)
        if answer.status not in (200, 201):
            raise BenchFailure(
                f"server-side apply of {path} on {cluster} answered {answer.status}: "
                f"{answer.data[:300].decode(errors='replace')}"
            )

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(inflight, thread_name_prefix="ssa-writer") as pool:
            for _ in pool.map(apply, requests):
                pass
        return time.monotonic() - started, sum(cpu)
    finally:
        for manager, _, _ in pools.values():
            manager.clear()
