"""The JSON API's request bodies, checked before anything is bound: a refused field is a 422
naming it and the fix, never an object half-written on the Control Plane."""

from pydantic import BaseModel, Field, field_validator

from bind_api import inputs
from klutch_gitops import tenant_kubeconfig
from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import (
    TENANT_TRANSPORTS,
    check_branch,
    check_repo_path,
    normalize_repo_url,
    redact,
    url_transport,
)


class RepositoryIn(BaseModel):
    url: str
    branch: str = "main"
    path: str = "."
    app_namespaces: list[str] = Field(
        alias="appNamespaces", min_length=1, max_length=inputs.MAX_APP_NAMESPACES
    )
    username: str | None = None
    password: str | None = Field(default=None, repr=False)
    ssh_private_key: str | None = Field(default=None, alias="sshPrivateKey", repr=False)
    known_hosts: str | None = Field(default=None, alias="knownHosts")

    @field_validator("url")
    @classmethod
    def _names_a_repository(cls, url: str) -> str:
        """Refused before anything is bound; credentials belong in their own fields."""
        if redact(url) != url:  # linear in the URL's length, whatever its length
            raise ValueError(
                "the repository URL carries credentials: send them as username/password or "
                "sshPrivateKey, which go to a Secret"
            )
        try:
            url_transport(url, TENANT_TRANSPORTS)  # no file://, ext::, -options (urls.py)
            normalize_repo_url(url)
        except KlutchError as error:
            raise ValueError(f"{error.message} ({error.fix})") from None
        return url

    @field_validator("branch")
    @classmethod
    def _a_branch(cls, branch: str) -> str:
        """A name git check-ref-format accepts; it reaches git's argv in the reconciler."""
        if problem := check_branch(branch):
            raise ValueError(
                f"the branch {problem}; name a branch git accepts, e.g. main or release/1.2"
            )
        return branch

    @field_validator("path")
    @classmethod
    def _a_folder(cls, path: str) -> str:
        """A folder inside the repository: the reconciler reads claims below it."""
        if problem := check_repo_path(path):
            raise ValueError(
                f"the path {problem}; name a folder inside the repository, e.g. claims"
            )
        return path

    @field_validator("app_namespaces")
    @classmethod
    def _namespace_names(cls, names: list[str]) -> list[str]:
        """DNS-1123 labels, each once: checked before anything is bound (no orphan Secret)."""
        return inputs.app_namespaces(names)


class BindingIn(BaseModel):
    cluster_id: str = Field(alias="clusterId", min_length=1, max_length=253)
    apis: list[str] = Field(min_length=1, max_length=64)
    repository: RepositoryIn | None = None
    app_kubeconfig: str | None = Field(default=None, alias="appKubeconfig", repr=False)

    @field_validator("cluster_id")
    @classmethod
    def _cluster_id(cls, value: str) -> str:
        """Half of the identity annotation: never a '#', never a control character."""
        return inputs.cluster_id(value)

    @field_validator("app_kubeconfig")
    @classmethod
    def _tenant_kubeconfig(cls, text: str | None) -> str | None:
        """Checked before anything is bound, as the reconciler checks it again before use: a
        kubeconfig that could run a command, read a file or reach a proxy is a 422 naming the
        field (``users[0].user.exec``) and the fix, never a stored Secret."""
        if text is not None:
            try:
                tenant_kubeconfig.parse(text)
            except KlutchError as error:
                raise ValueError(f"{error.message} (fix: {error.fix})") from None
        return text
