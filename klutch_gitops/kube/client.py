"""A thin REST layer over the Kubernetes API: apply, get, list, delete, watch.

The reconciler knows every resource's group, version and plural from the APIServiceExports, so it
builds paths directly instead of paying the dynamic client's discovery round-trips (and its stale
cache when CRDs appear at run time). Authentication comes from the official client's kubeconfig
handling for the platform's own files, and from ``tenant_kubeconfig`` for kubeconfigs tenants give.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from klutch_gitops import tenant_kubeconfig
from klutch_gitops.errors import KlutchError, yaml_problem

FIELD_MANAGER = "klutch-gitops"


@dataclass(frozen=True)
class Resource:
    """A REST resource: where objects of one kind live."""

    group: str
    version: str
    plural: str
    kind: str = ""
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


class KubeError(Exception):
    """An API error with the server's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, error: ApiException) -> KubeError:
        try:
            body = json.loads(error.body or "{}")
        except ValueError:
            body = {}
        return cls(
            error.status or 0,
            body.get("reason") or str(error.reason or ""),
            body.get("message") or str(error.body or error.reason or ""),
        )

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def api_client(
    kubeconfig: Path | str | Mapping[str, Any], context: str | None = None
) -> client.ApiClient:
    """An ApiClient from a kubeconfig file path, kubeconfig YAML text, or a parsed kubeconfig.

    Only a Path goes through the kubernetes client's loader (exec plugins, ``tokenFile`` with
    reloading, file paths): such files are the platform team's own, named in its config or on a
    command line. Text and mappings come from bind requests and Secrets, which tenants write, so
    they are parsed strictly by ``tenant_kubeconfig`` (KubeconfigRefused names what is refused).
    """
    if isinstance(kubeconfig, Path):
        parsed = read_kubeconfig_file(kubeconfig, context)
        try:
            api: client.ApiClient = config.new_client_from_config(
                config_file=str(kubeconfig), context=context
            )
        except (ConfigException, OSError, ValueError) as error:  # e.g. a missing certificate file
            raise KlutchError(
                f"kubeconfig {kubeconfig}: {error}"[:500], f"fix the kubeconfig file {kubeconfig}"
            ) from None
        token_file = _token_file(parsed, context)
        if token_file is not None:
            api.configuration.refresh_api_key_hook = TokenFileReloader(
                kubeconfig.parent / token_file
            )
        return api
    if context is not None:
        raise ValueError("context applies to kubeconfig files only: a tenant's has one context")
    return tenant_kubeconfig.load_client(kubeconfig)


def read_kubeconfig_file(path: Path, context: str | None = None) -> dict[str, Any]:
    """The parsed kubeconfig, checked before the kubernetes client's loader sees it: that one
    raises errors that name neither the file nor the fix (or a bare traceback, for a directory)."""
    fix = f"point at a kubeconfig file (kubectl config view --raw --minify > {path.name})"
    try:
        text = path.read_text()
    except OSError as error:
        raise KlutchError(f"cannot read kubeconfig {path}: {error.strerror}", fix) from None
    except UnicodeDecodeError:
        raise KlutchError(f"kubeconfig {path} is not text", fix) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KlutchError(
            f"kubeconfig {path} is not valid YAML: {yaml_problem(error)}", fix
        ) from None
    if not isinstance(data, dict) or not data.get("clusters"):
        raise KlutchError(f"kubeconfig {path} holds no clusters", fix)
    name = context or data.get("current-context")
    if not name:
        raise KlutchError(
            f"kubeconfig {path} has no current-context",
            f"run kubectl --kubeconfig {path} config use-context NAME, or pass --context",
        )
    contexts = [c.get("name") for c in data.get("contexts") or [] if isinstance(c, dict)]
    if name not in contexts:
        known = ", ".join(map(str, contexts)) or "none"
        raise KlutchError(
            f"kubeconfig {path} has no context {name!r} (contexts: {known})",
            "name one of its contexts",
        )
    return data


def _token_file(kubeconfig: Any, context: str | None) -> str | None:
    """The ``tokenFile`` of the context's user, if it has one."""
    try:
        name = context or kubeconfig["current-context"]
        ctx = next(c["context"] for c in kubeconfig["contexts"] if c["name"] == name)
        user = next(u["user"] for u in kubeconfig["users"] if u["name"] == ctx["user"])
        token_file = user.get("tokenFile")
    except (KeyError, TypeError, StopIteration, AttributeError):
        return None
    return token_file if isinstance(token_file, str) and token_file else None


class TokenFileReloader:
    """Re-reads a kubeconfig user's ``tokenFile`` at most once a minute, as client-go does.

    The official client reads it once, but a Pod's projected service-account token is rotated by
    the kubelet, so a long-running process must pick up the new one.
    """

    INTERVAL_SECONDS = 60.0

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_at = time.monotonic()  # the loader has just read it

    def __call__(self, configuration: client.Configuration) -> None:
        now = time.monotonic()
        if now - self.read_at < self.INTERVAL_SECONDS:
            return
        self.read_at = now
        try:
            token = self.path.read_text().strip()
        except OSError:
            return  # keep the last token: a refused request says why
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"


class Kube:
    """Calls against one cluster with one identity. ``identity`` names it for sharing caches
    (kube.shared): the Resolver's digest of the kubeconfig, or a Kube's own, shared with none."""

    def __init__(
        self, api: client.ApiClient, timeout: float = 30.0, identity: str | None = None
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.identity = identity or f"unshared-{uuid.uuid4().hex}"

    def widen_pool(self, connections: int) -> Kube:
        """Keep up to ``connections`` connections per host (default cpu_count * 5): a Kube
        shared by many registrations carries all their writes and watches, and beyond the pool
        urllib3 discards each connection after use (the next pays a TLS handshake). Call it
        before the first request: only pools made afterwards get it."""
        self.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = connections
        return self

    def _object(self, method: str, path: str, **request: Any) -> dict[str, Any]:
        """One request whose answer is a JSON object."""
        found: dict[str, Any] = self._call(method, path, **request)
        return found

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """One request; a non-2xx answer raises KubeError with the server's Status."""
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=timeout or self.timeout,
            )
        except ApiException as error:
            raise KubeError.of(error) from None
        if response.status >= 300:  # a redirect is never followed (tenant_kubeconfig): an error
            raise KubeError.of(
                ApiException(
                    status=response.status,
                    reason=response.reason,
                    body=response.read().decode(errors="replace"),
                )
            )
        if stream:
            return response.response
        data = response.read()
        return json.loads(data) if data else {}

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._object("GET", resource.path(namespace, name))
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        limit: int | None = None,
        each: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects and the list's resourceVersion, to start a watch from; ``limit``: in pages
        (client-go's pager), ``each`` applied to one before the next, never all held whole."""
        query = [("labelSelector", label_selector)] if label_selector else []
        query += [("limit", str(limit))] if limit else []
        items: list[dict[str, Any]] = []
        while True:
            result = self._call("GET", resource.path(namespace), query=query)
            items.extend(map(each or (lambda obj: obj), result.get("items") or []))
            meta = result.get("metadata") or {}
            if not limit or not meta.get("continue"):
                return items, meta.get("resourceVersion", "")
            query = [q for q in query if q[0] != "continue"] + [("continue", meta["continue"])]

    def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str = FIELD_MANAGER,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply. Without ``force`` a field owned by another manager is a 409."""
        meta = obj["metadata"]
        query = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._object(
            "PATCH",
            resource.path(meta.get("namespace"), meta["name"], subresource),
            query=query,
            body=dict(obj),
            content_type="application/apply-patch+yaml",
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """A JSON merge patch (for finalizers and status written by a non-owner)."""
        return self._object(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    def delete(
        self, resource: Resource, namespace: str | None, name: str, propagation: str = "Background"
    ) -> bool:
        """Delete; False when it was already gone."""
        try:
            self._call(
                "DELETE",
                resource.path(namespace, name),
                body={"propagationPolicy": propagation},
            )
        except KubeError as error:
            if error.not_found:
                return False
            raise
        return True

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._object("POST", resource.path(obj["metadata"].get("namespace")), body=dict(obj))

    def replace(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """An update (PUT): with ``metadata.resourceVersion`` set, a concurrent change is a 409."""
        meta = obj["metadata"]
        return self._object(
            "PUT", resource.path(meta.get("namespace"), meta["name"]), body=dict(obj)
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events from ``resource_version`` on; ends when the server closes the watch.

        A ``410 Gone`` (history compacted) surfaces as KubeError(410): relist and watch again.
        """
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = self._call(
            "GET", resource.path(namespace), query=query, stream=True, timeout=timeout_seconds + 30
        )
        try:
            buffer = b""
            for chunk in response.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise KubeError(
                            status.get("code", 0),
                            status.get("reason", ""),
                            status.get("message", ""),
                        )
                    yield event["type"], event["object"]
        finally:
            response.release_conn()
