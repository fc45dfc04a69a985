"""A RepositoryBinding's spec: what a tenant may register, the source of the CRD's
``openAPIV3Schema.properties.spec`` (``models.schemas``) and of the reconciler's check of every
object it reads (``repository_config.from_repository_binding``). It narrows the registration every
config entry shares (``models.registration``).

Tenants get https:// and ssh:// only, and every Secret they name lives in their own namespace:
the references carry no namespace. The ``x-kubernetes-validations`` rules are the apiserver's copy
of the checks the validators make here.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from klutch_gitops.config import GitCredentialsRef, SecretRef
from klutch_gitops.models.refs import SECRET_KEY, SECRET_NAME
from klutch_gitops.models.registration import (
    References,
    RegistrationFields,
    WriteBackFields,
    branch_problem,
    path_problem,
)
from klutch_gitops.models.types import Checked, Strict
from klutch_gitops.urls import TENANT_TRANSPORTS, InvalidRepoURL, url_transport

# The apiserver's pattern: never looser than url_transport for tenants (tests/unit/
# test_tenant_repositories.py); what it lets through and the reconciler refuses lands in the status.
_CHAR = r"[^\s\x00-\x1f\x7f\\]"
_HOST = r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?"
_USER = r"[A-Za-z0-9_][A-Za-z0-9._~+-]*"
TENANT_URL_PATTERN = (
    rf"^(https://{_HOST}(:[0-9]{{1,5}})?/[^\s\x00-\x1f\x7f\\-]{_CHAR}*"
    rf"|ssh://({_USER}@)?{_HOST}(:[0-9]{{1,5}})?/[^\s\x00-\x1f\x7f\\-]{_CHAR}*"
    rf"|({_USER}@)?{_HOST}:(/[^/\s\x00-\x1f\x7f\\]|[^/:\s\x00-\x1f\x7f\\-]){_CHAR}*)$"
)
BRANCH_RULE = {
    "rule": "self != 'HEAD' && !self.contains('..') && !self.contains('//') && "
    "!self.contains('/.') && !self.endsWith('/') && !self.endsWith('.') && "
    "!self.endsWith('.lock') && !self.contains('.lock/')",
    "message": "must be a branch name git check-ref-format accepts: no '..' or '//', no part "
    "starting with '.' or ending with '.lock', no trailing '/' or '.'",
}
BRANCH_SCHEMA = {
    "maxLength": 255,
    "pattern": r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$",
    "x-kubernetes-validations": [BRANCH_RULE],
}


def _tenant_url(value: str) -> tuple[str, str] | None:
    try:
        url_transport(value, TENANT_TRANSPORTS)
    except InvalidRepoURL as error:
        return error.message, error.fix
    return None


TenantURL = Annotated[str, Checked(_tenant_url, {"maxLength": 2048, "pattern": TENANT_URL_PATTERN})]
TenantBranch = Annotated[str, Checked(branch_problem, BRANCH_SCHEMA)]
TenantPath = Annotated[
    str,
    Checked(
        path_problem,
        {
            "minLength": 1,
            "maxLength": 1024,
            "pattern": r"^[^/\x00-\x1f\x7f\\-][^\x00-\x1f\x7f\\]*$",
            "x-kubernetes-validations": [
                {
                    "rule": "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",
                    "message": "path must be relative and must not contain '..'",
                },
                {
                    "rule": "!self.matches('(^|/)[.]git(/|$)')",
                    "message": "path must not name the .git folder",
                },
            ],
        },
    ),
]
Email = Annotated[str, Field(min_length=1, max_length=256, json_schema_extra={"format": "email"})]


class KubeconfigSecret(Strict):
    """A Secret in this namespace holding a kubeconfig."""

    name: SECRET_NAME = Field(description="Name of the Secret.")
    key: SECRET_KEY = Field("kubeconfig", description="Key of the kubeconfig in the Secret.")


class ClusterAccess(Strict):
    """How the reconciler reaches a cluster: a kubeconfig in a Secret of this namespace."""

    kubeconfig_secret_ref: KubeconfigSecret = Field(
        description="Secret in this namespace with the kubeconfig."
    )


class NamedSecret(Strict):
    """A Secret in this namespace."""

    name: SECRET_NAME = Field(description="Name of the Secret.")


class TokenSecret(Strict):
    """A key of a Secret in this namespace."""

    name: SECRET_NAME = Field(description="Name of the Secret.")
    key: SECRET_KEY = Field("token", description="Key of the value in the Secret.")


class TenantAuthor(Strict):
    """The author of status commits."""

    name: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        None, description="Author name."
    )
    email: Email | None = Field(None, description="Author email address.")


class TenantWriteBack(WriteBackFields[TenantBranch, TenantAuthor]):
    """How observed status is committed back to the repository."""


class RepositoryBindingSpec(
    RegistrationFields[TenantBranch, TenantPath, ClusterAccess, TenantWriteBack]
):
    """Where the claims live, where they may go, and how status returns to Git."""

    model_config = Strict.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.writeBack.mode != 'branch' || "
                    "self.writeBack.branch != self.branch",
                    "message": "writeBack.branch must differ from branch, "
                    "or status commits would loop",
                }
            ]
        }
    }

    url: TenantURL = Field(
        description="Repository URL: https://host/path, ssh://[user@]host/path or user@host:path "
        "(no file://, other transports, or user, host or path starting with '-'); credentials "
        "belong in credentialsSecretRef, not in the URL."
    )
    credentials_secret_ref: NamedSecret | None = Field(
        None,
        description="Secret in this namespace with Git credentials: keys username and password "
        "for HTTPS, or ssh-privatekey and known_hosts for SSH; none for public repositories.",
    )
    webhook_secret_ref: TokenSecret | None = Field(
        None, description="Secret here with the shared secret that signs the webhooks."
    )
    forge_token_secret_ref: TokenSecret | None = Field(
        None,
        description="Secret here with an API token of the Git host (GitHub, GitLab, Gitea) that "
        "may comment on pull requests and set commit statuses; without it, pull-request "
        "webhooks are not planned.",
    )

    def references(self, namespace: str) -> References:
        """Every reference names a Secret of the binding's own ``namespace``."""

        def own(secret: KubeconfigSecret | TokenSecret) -> SecretRef:
            return SecretRef(namespace=namespace, name=secret.name, key=secret.key)

        credentials = self.credentials_secret_ref
        return References(
            app_kubeconfig=own(self.app_cluster.kubeconfig_secret_ref),
            control_plane_kubeconfig=own(self.control_plane.kubeconfig_secret_ref),
            credentials=GitCredentialsRef(
                secret=SecretRef(namespace=namespace, name=credentials.name)
            )
            if credentials
            else None,
            webhook_secret=own(self.webhook_secret_ref) if self.webhook_secret_ref else None,
            forge_token=own(self.forge_token_secret_ref) if self.forge_token_secret_ref else None,
        )
