"""What the benchmarks stand on: a local stack, Git repositories of claims, consumers bound on the
Control Plane, and ways to wait for what the reconciler does without busy-polling the clusters."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.apis import mapped_namespace
from klutch_gitops.consumer import bind_consumer, binder_kubeconfig
from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from klutch_gitops.kube.client import NAMESPACES, Kube, KubeError, Resource, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.informer import Informer

CLAIM_CRDS = load_dev_claim_crds()
POSTGRES = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")
PLANS = (
    "postgresql-single-nano",
    "postgresql-single-small",
    "postgresql-single-medium",
    "postgresql-single-big",
)
HUMAN = ("-c", "user.name=Bench Developer", "-c", "user.email=bench@example.com")
PR_SET_PDEATHSIG = 1
Progress = Callable[[str], None]


class BenchFailure(Exception):
    """A measurement that could not complete; the message says which and why."""


# -- the stack -------------------------------------------------------------------------------


@dataclass
class Clusters:
    """Admin access to both clusters of a running stack."""

    info: StackInfo
    app: Kube
    control_plane: Kube
    pids: dict[str, int]  # the stack's processes by name, to read their CPU

    def kubeconfig(self, cluster: str) -> Path:
        return Path(self.info.clusters[cluster].kubeconfig)


@contextmanager
def running_stack(state_dir: Path) -> Iterator[Clusters]:
    """A dedicated stack for one run, stopped on exit, Ctrl-C and SIGTERM alike."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    stack = LocalStack(state_dir)
    try:
        info = stack.start()
        clusters = Clusters(
            info,
            Kube(api_client(Path(info.clusters["app"].kubeconfig))),
            Kube(api_client(Path(info.clusters["control-plane"].kubeconfig))),
            {p.name: p.popen.pid for p in stack.processes if p.popen is not None},
        )
        install_crds(clusters.control_plane.api, load_crds(cluster="control-plane") + CLAIM_CRDS)
        yield clusters
    finally:
        stack.stop()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def die_with_parent() -> None:
    """``preexec_fn`` for children that must not outlive the benchmark."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# -- Git -------------------------------------------------------------------------------------


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True)


def claim_text(name: str, namespace: str, plan: str = PLANS[0]) -> str:
    return f"""# {name}: a database for the team
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: {name}
  namespace: {namespace}
spec:
  service: a9s-postgresql13
  plan: {plan}
  writeConnectionSecretToRef:
    name: {name}-conn
"""


def claim_name(index: int) -> str:
    return f"db-{index:05d}"


def claim_file(index: int) -> str:
    return f"claims/{claim_name(index)}.yaml"


def write_claims(tree: Path, namespace: str, count: int) -> None:
    for index in range(count):
        path = tree / claim_file(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(claim_text(claim_name(index), namespace))


def seeded_remote(remote: Path, clone: Path, namespace: str, claims: int) -> None:
    """A bare repository whose main holds ``claims`` claim files, and a person's clone of it."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(clone)], check=True)
    (clone / "README.md").write_text("team claims\n")
    write_claims(clone, namespace, claims)
    git(clone, "add", "-A")
    git(clone, *HUMAN, "commit", "-q", "-m", f"{claims} claims")
    git(clone, "remote", "add", "origin", str(remote))
    git(clone, "push", "-q", "origin", "main")
    git(clone, "branch", "-q", "--set-upstream-to=origin/main")


def remote_head(remote: Path, branch: str = "main") -> str:
    """The branch's commit, read from the ref file (a push writes loose refs) or git."""
    ref = remote / "refs" / "heads" / branch
    try:
        return ref.read_text().strip()
    except OSError:
        return git(remote, "rev-parse", branch).stdout.strip()


def remote_file(remote: Path, name: str, ref: str = "main") -> str:
    return git(remote, "show", f"{ref}:{name}", check=False).stdout


def timed_push(clone: Path, attempts: int = 5) -> tuple[float, float]:
    """Push the clone's main: how long the push that succeeded took, and when it returned. A
    rejection (the bot committed meanwhile) is followed by a rebase and another push, untimed."""
    for _ in range(attempts):
        started = time.monotonic()
        result = git(clone, "push", "-q", "origin", "HEAD:main", check=False)
        finished = time.monotonic()
        if result.returncode == 0:
            return finished - started, finished
        git(clone, "pull", "-q", "--rebase", "origin", "main")
    raise BenchFailure(f"git push from {clone} was rejected {attempts} times")


# -- tenants ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    """A consumer on the Control Plane, its App namespace, and the binder kubeconfig file."""

    consumer: str
    namespace: str
    binder: Path

    @property
    def mapped(self) -> str:
        return mapped_namespace(self.consumer, self.namespace)


def make_tenant(clusters: Clusters, consumer: str, namespace: str, directory: Path) -> Tenant:
    """Bind ``consumer`` the way the bind API does and create its App namespace."""
    clusters.app.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    admin = clusters.control_plane
    bind_consumer(admin, consumer, f"bench#{consumer}", CLAIM_CRDS)
    binder = directory / f"{consumer}.kubeconfig"
    binder.touch(mode=0o600)
    binder.write_text(yaml.safe_dump(binder_kubeconfig(admin, consumer)))
    return Tenant(consumer, namespace, binder)


# -- observing -------------------------------------------------------------------------------


def count(kube: Kube, resource: Resource, namespace: str | None = None) -> int:
    """How many objects exist, from a one-item page: no full list on every poll. Zero while the
    resource is not served yet (the reconciler installs the App Cluster's CRDs itself)."""
    try:
        page = kube._call("GET", resource.path(namespace), query=[("limit", "1")])
    except KubeError as error:
        if error.not_found:
            return 0
        raise
    return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, interval: float = 0.2
) -> float:
    """Poll ``check``; the monotonic time it first held. Raises BenchFailure on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval)
    raise BenchFailure(f"timed out after {timeout:.0f}s waiting for {what}")


class Expect:
    """Notes when an object matching a predicate is seen, from a watch rather than polling.

    ``arm(predicate)`` before causing the change, ``wait()`` after: the event's own arrival time
    is returned, so the waiting thread's wake-up does not count.
    """

    def __init__(self, kube: Kube, resource: Resource, namespace: str, name: str) -> None:
        self._cond = threading.Condition()
        self._predicate: Callable[[dict], bool] | None = None
        self._seen: float | None = None
        self.informer = Informer(kube, resource, self._on_event, namespace=namespace, name=name)

    def start(self, timeout: float = 60.0) -> Expect:
        self.informer.start()
        if not self.informer.synced.wait(timeout):
            raise BenchFailure(f"the watch {self.informer.name} did not sync in {timeout:.0f}s")
        return self

    def stop(self) -> None:
        self.informer.stop()

    def arm(self, predicate: Callable[[dict], bool]) -> None:
        with self._cond:
            self._predicate, self._seen = predicate, None

    def wait(self, what: str, timeout: float) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: self._seen is not None, timeout):
                raise BenchFailure(f"timed out after {timeout:.0f}s waiting for {what}")
            assert self._seen is not None
            return self._seen

    def _on_event(self, event: str, obj: dict) -> None:
        now = time.monotonic()
        with self._cond:
            waiting = self._seen is None and self._predicate is not None
            if waiting and event != "DELETED" and self._predicate(obj):
                self._seen = now
                self._cond.notify_all()


def vm_kib(pid: int, field: str) -> int | None:
    """A ``/proc/<pid>/status`` size in KiB (VmHWM: peak resident set, VmRSS: current)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def converge(
    counters: dict[str, Callable[[], int]],
    target: int,
    timeout: float,
    progress: Progress,
    alive: Callable[[], str | None] = lambda: None,
) -> dict[str, float]:
    """Poll each counter until it reaches ``target``; when each first did (monotonic)."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    seen = dict.fromkeys(counters, 0)
    while len(done) < len(counters):
        if time.monotonic() > deadline:
            got = ", ".join(f"{name} {seen[name]}/{target}" for name in counters)
            raise BenchFailure(f"claims did not converge within {timeout:.0f}s ({got})")
        if problem := alive():
            raise BenchFailure(problem)
        for name, counter in counters.items():
            if name not in done:
                seen[name] = counter()
                if seen[name] >= target:
                    done[name] = time.monotonic()
        progress(", ".join(f"{name} {seen[name]}/{target}" for name in counters))
        time.sleep(0.2)
    return done
