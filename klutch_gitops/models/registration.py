"""What every registration says, whoever writes it: the shared base of a config file's repository
entry (``models.reconciler.Repository``) and a RepositoryBinding's spec
(``models.binding.RepositoryBindingSpec``), the registration-name rule, and the one builder of the
runtime ``RegistrationSpec``.

The narrowing models choose the types of the generic fields (a tenant's branches and paths carry
the CRD's rules, a tenant reaches clusters through Secrets of its own namespace only), declare
their URL and add the references only they may hold. Defaults, descriptions and the write-back
loop check live here once, so a field added here shows in the config file, the CRD and both
JSON schemas.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import AfterValidator, Field, model_validator

from klutch_gitops.config import Bot, GitCredentialsRef, RegistrationSpec, SecretRef, WriteBack
from klutch_gitops.models.types import Checked, Duration, Name, Strict, problem
from klutch_gitops.urls import MAX_BRANCH_LENGTH, MAX_PATH_LENGTH, check_branch, check_repo_path

MAX_APP_NAMESPACES = 256
# A registration's name is also a label value on every object it creates, so dots are fine.
REGISTRATION_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$"
BRANCH_FIX = "name a branch git check-ref-format accepts"
PATH_FIX = "use a folder inside the repository, e.g. claims"


def registration_name(meta: Mapping[str, Any]) -> str:
    """A RepositoryBinding's registration name, ``<namespace>.<name>`` cut to a label value: it
    matches ``REGISTRATION_NAME_PATTERN`` like every config entry's name."""
    return f"{meta['namespace']}.{meta['name']}"[:63].rstrip("-.")


def _registration_name(value: str) -> tuple[str, str] | None:
    if re.match(REGISTRATION_NAME_PATTERN, value):
        return None
    return f"{value!r} is not valid", "use lowercase letters, digits, '-' and '.', at most 63"


def branch_problem(value: str) -> tuple[str, str] | None:
    found = check_branch(value)
    return (f"{value!r} {found}", BRANCH_FIX) if found else None


def path_problem(value: str) -> tuple[str, str] | None:
    found = check_repo_path(value)
    return (f"{value!r} {found}", PATH_FIX) if found else None


RegistrationName = Annotated[
    str,
    Checked(
        _registration_name,
        {"pattern": REGISTRATION_NAME_PATTERN, "maxLength": 63, "minLength": 1},
    ),
]
Branch = Annotated[str, Checked(branch_problem, {"minLength": 1, "maxLength": MAX_BRANCH_LENGTH})]
RepoPath = Annotated[str, Checked(path_problem, {"minLength": 1, "maxLength": MAX_PATH_LENGTH})]


def _distinct(values: list[str]) -> list[str]:
    repeated = sorted(v for v, n in Counter(values).items() if n > 1)
    if repeated:
        raise problem(f"names {', '.join(repeated)} more than once", "list every namespace once")
    return values


AppNamespaces = Annotated[
    list[Name],
    Field(min_length=1, max_length=MAX_APP_NAMESPACES, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_distinct),
]

BranchT = TypeVar("BranchT")
PathT = TypeVar("PathT")
AuthorT = TypeVar("AuthorT")
AccessT = TypeVar("AccessT")
WriteBackT = TypeVar("WriteBackT", bound="WriteBackFields[Any, Any]")


class WriteBackFields(Strict, Generic[BranchT, AuthorT]):
    """How observed status is committed back to the repository."""

    mode: Literal["inline", "files", "branch"] = Field(
        "inline", description="inline (in the manifests), files (beside them), or branch."
    )
    branch: BranchT = Field(
        "klutch-status",  # type: ignore[assignment]  # validated into BranchT
        description="Branch that receives status commits in branch mode.",
    )
    author: AuthorT | None = Field(
        None, description="Author of status commits; the reconciler's bot when unset."
    )


class RegistrationFields(Strict, Generic[BranchT, PathT, AccessT, WriteBackT]):
    """Where the claims live, where they may go, and how status returns to Git."""

    url: str  # each narrowing model gives the URLs it accepts, and says which
    branch: BranchT = Field("main", description="Branch to follow.")  # type: ignore[assignment]
    path: PathT = Field(
        ".",  # type: ignore[assignment]  # validated into PathT
        description="Folder of the manifests, relative to the repository root; .klutch/ below it "
        "is the reconciler's.",
    )
    app_namespaces: AppNamespaces = Field(
        description="App Cluster namespaces the repository's claims may be written to."
    )
    app_cluster: AccessT = Field(description="How the reconciler reaches the App Cluster.")
    control_plane: AccessT = Field(
        description="How the reconciler reaches the Control Plane as this consumer."
    )
    write_back: WriteBackT = Field(
        {},  # validated into the narrowing model's WriteBack
        validate_default=True,
        description="How observed status is committed back to the repository.",
    )
    app_sync: Literal["reconciler", "external"] = Field(
        "reconciler",
        description="Who applies the claims to the App Cluster: reconciler, or external when "
        "Argo CD or Flux does and the reconciler only mirrors them and writes status back.",
    )
    suspend: bool = Field(
        False, description="Stops fetching, applying and writing back until set to false again."
    )
    poll_interval: Duration | None = Field(
        None,
        description="How often to check for new commits, e.g. 30s; the reconciler's global "
        "pollInterval when unset; webhooks come sooner.",
    )

    @model_validator(mode="after")
    def _no_loop(self) -> Self:
        if self.write_back.mode == "branch" and self.write_back.branch == self.branch:
            raise problem(
                "writeBack.branch must differ from branch, or status commits would loop",
                "set writeBack.branch to another branch, e.g. klutch-status",
            )
        return self


@dataclass(frozen=True)
class References:
    """A registration's references, resolved where its model says: against the config file's
    folder, or in the RepositoryBinding's own namespace."""

    app_kubeconfig: SecretRef
    control_plane_kubeconfig: SecretRef
    credentials: GitCredentialsRef | None
    webhook_secret: SecretRef | None
    forge_token: SecretRef | None


def registration_spec(
    entry: RegistrationFields[Any, Any, Any, Any],
    references: References,
    *,
    name: str,
    consumer_namespace: str,
    suspend: bool = False,
) -> RegistrationSpec:
    """The runtime spec of a validated config entry or RepositoryBinding spec; ``suspend`` adds a
    suspension from outside the spec (a RepositoryBinding's annotation)."""
    author = entry.write_back.author
    return RegistrationSpec(
        name=name,
        url=entry.url,
        consumer_namespace=consumer_namespace,
        app_namespaces=tuple(entry.app_namespaces),
        app_kubeconfig=references.app_kubeconfig,
        control_plane_kubeconfig=references.control_plane_kubeconfig,
        branch=entry.branch,
        path=entry.path,
        credentials=references.credentials,
        webhook_secret=references.webhook_secret,
        forge_token=references.forge_token,
        write_back=WriteBack(
            mode=entry.write_back.mode,
            branch=entry.write_back.branch,
            # a tenant may leave out either; then the reconciler's bot writes
            author=Bot(author.name, author.email)
            if author and author.name and author.email
            else None,
        ),
        poll_interval=entry.poll_interval,
        suspend=entry.suspend or suspend,
        app_sync=entry.app_sync,
    )
