"""What the reconciler holds for one registration, in one record (the idea of Kopf's per-object
``ResourceMemory``): where it comes from, its spec, the generations, its sync, its errors, the
reconcile requests and what its report last said. Forgetting a registration is dropping its
record: nothing about it is left in a side table.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from klutch_gitops.config import RegistrationSpec
from reconciler.sync.repository import Sync
from reconciler.work import Work


@dataclass(frozen=True)
class ConfigEntry:
    """A registration from the reconciler's config file."""

    def __str__(self) -> str:
        return "config"


@dataclass(frozen=True)
class BindingRef:
    """A registration from the RepositoryBinding ``namespace/name`` on the Control Plane."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"RepositoryBinding {self.namespace}/{self.name}"


Origin = ConfigEntry | BindingRef


@dataclass(eq=False)
class Registration:
    """One registration's state. ``spec`` is None while it is refused or went away and its sync
    has yet to stop; ``lock`` serialises its work items (a restart replaces the checkouts that
    its pass and write-back use)."""

    name: str
    origin: Origin
    spec: RegistrationSpec | None = None
    generation: int | None = None  # its RepositoryBinding's metadata.generation, newest seen
    followed: int | None = None  # the generation its sync runs
    sync: Sync | None = None
    error: str | None = None  # the last pass or registration failed with this
    reference_error: str | None = None  # a Secret or file that could not be used
    write_back_error: str | None = None  # the last write-back failed with this
    requested: str | None = None  # the newest reconcile request
    handled: str | None = None  # the reconcile request its last pass answered
    konnector_warning: str | None = None  # the foreign-konnector conflict last evented
    shown: tuple[RegistrationSpec, dict[str, Any]] | None = None  # last report: spec and status
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def binding(self) -> BindingRef | None:
        """The RepositoryBinding it comes from, if it does."""
        return self.origin if isinstance(self.origin, BindingRef) else None

    @property
    def observed_generation(self) -> int | None:
        """The generation its status says it observed: the followed one, once it has one."""
        return self.followed if self.followed is not None else self.generation

    def went(self) -> None:
        """Its RepositoryBinding was deleted: the next ``register`` stops and drops it."""
        self.spec = self.generation = self.followed = self.requested = None

    def refuse(self, error: str) -> bool:
        """Its RepositoryBinding's spec is refused: whether a sync of its former spec must stop."""
        stop, self.spec, self.error = self.spec is not None, None, error
        return stop

    def follow(
        self,
        spec: RegistrationSpec,
        generation: int | None,
        requested: str | None,
        handled: str | None,
    ) -> Work | None:
        """Take a RepositoryBinding's valid spec, generation, reconcile request and the request
        its status says was answered: the work that needs (None: a status update of ours, or a
        no-op edit). A new request on an unchanged spec fetches and passes now."""
        asked, self.requested = self.requested, requested
        if handled is not None and self.handled is None:  # kept across restarts until a pass
            self.handled = handled  # answers anew
        if self.spec == spec and self.sync is not None:
            if asked != requested and requested is not None:
                self.sync.trigger_fetch()
            if generation is not None and generation != self.followed:
                self.generation = self.followed = generation  # the same spec
                return Work.SYNC  # a pass reports the generation observed
            return None
        self.spec = spec
        if generation is not None:
            self.generation = generation
        return Work.REGISTER

    def unreport(self) -> None:
        """Drop what its report showed and remembered: another replica, or nobody, reports it."""
        self.shown = self.write_back_error = self.handled = self.konnector_warning = None
