"""The cold sync's lower bound: a concurrent server-side-apply writer of the same N claims into
both clusters (a fresh App namespace and a fresh Control Plane namespace), ``INFLIGHT`` requests
in flight over both, with nothing else to decide: no Git, no planning, no status.

It is what the two kube-apiservers (and this machine's two cores) allow, so the reconciler's
cold sync is compared with it, not with zero. One HTTP/1.1 connection per request in flight
(httpx's async client, no client-side rate limit); each apply is the PATCH
``application/apply-patch+yaml`` that kubectl and the reconciler send.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Mapping
from typing import Any

import httpx
import yaml
from kubernetes import client

from bench.claims import claim_files
from bench.measure import BenchFailure
from klutch_gitops.dev.testkit.claims import POSTGRES

# 8 at a time per cluster, as the reconciler writes eight at a time within a pass: the two
# kube-apiservers and etcd share two cores, so more in flight mostly queues (their default
# --max-mutating-requests-inflight is 200, far above) and costs the writer CPU on the same cores.
# A/B in one process on one stack (concurrent_apply at each limit, 2 x 1000 claims, two rounds)
# on a busy machine (load 30): 4 in flight 8.5-10.6 s, 8: 14.5-16.0 s, 16: 12.4-15.2 s, 32:
# 14.0-24.3 s, 64: 26-28 s; the writer's CPU 3.3, 4.5, 5.9, 7.5, 13 s. Too noisy to pick from;
# ``--ssa-inflight`` lets an idle run try others.
INFLIGHT = 16
MANAGER = "bench-ssa-writer"


def http_client(api: client.ApiClient, limit: int) -> httpx.AsyncClient:
    """An async client with the kubeconfig's server, CA and client certificate or token."""
    config = api.configuration
    context = ssl.create_default_context(cafile=config.ssl_ca_cert)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    headers = {}
    if token := (config.api_key or {}).get("authorization") or (config.api_key or {}).get(
        "BearerToken"
    ):
        headers["Authorization"] = token if " " in token else f"Bearer {token}"
    return httpx.AsyncClient(
        base_url=config.host,
        verify=context,
        headers=headers,
        limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
        timeout=60,
    )


async def _apply_all(
    targets: Mapping[str, tuple[httpx.AsyncClient, str]],
    objects: Mapping[str, list[dict]],
    inflight: int,
) -> None:
    gate = asyncio.Semaphore(inflight)

    async def apply(http: httpx.AsyncClient, namespace: str, obj: dict[str, Any]) -> None:
        path = f"{POSTGRES.path(namespace)}/{obj['metadata']['name']}"
        async with gate:
            answer = await http.patch(
                path,
                params={"fieldManager": MANAGER, "force": "true"},
                content=json.dumps(obj),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
        if answer.status_code not in (200, 201):
            raise BenchFailure(
                f"server-side apply of {path} answered {answer.status_code}: {answer.text[:300]}"
            )

    async with asyncio.TaskGroup() as group:
        for cluster, (http, namespace) in targets.items():
            for obj in objects[cluster]:
                group.create_task(apply(http, namespace, obj))


def concurrent_apply(
    apis: Mapping[str, client.ApiClient],
    namespaces: Mapping[str, str],
    n: int,
    inflight: int = INFLIGHT,
) -> tuple[float, float]:
    """Server-side apply ``n`` claims into ``namespaces[cluster]`` of each cluster in ``apis``,
    ``inflight`` requests in flight over all. Seconds from the first request to the last answer
    (an applied object exists once its apply answered), and the CPU seconds the writer's thread
    spent meanwhile: near the first, the client and not the apiservers would be the limit."""
    objects = {
        cluster: [yaml.safe_load(text) for text in claim_files(namespace, n).values()]
        for cluster, namespace in namespaces.items()
    }

    async def run() -> tuple[float, float]:
        clients = {cluster: http_client(api, inflight) for cluster, api in apis.items()}
        try:
            targets = {c: (clients[c], namespaces[c]) for c in apis}
            started, cpu = time.monotonic(), time.thread_time()
            await _apply_all(targets, objects, inflight)
            return time.monotonic() - started, time.thread_time() - cpu
        finally:
            for http in clients.values():
                await http.aclose()

    try:
        return asyncio.run(run())
    except ExceptionGroup as group:
        raise group.exceptions[0] from None
