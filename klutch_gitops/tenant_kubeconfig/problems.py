"""What a refused tenant kubeconfig reports: each field's path, the problem and the fix, never a
value (a token or key never reaches a message, a log or a status)."""

from __future__ import annotations

from dataclasses import dataclass

from klutch_gitops.errors import KlutchError

INLINE_CREDENTIALS = (
    "put a bearer `token` or `client-certificate-data` + `client-key-data` inline in the user "
    "(a service account token of the App Cluster works)"
)
FLATTEN = "inline the file's content (`kubectl config view --minify --flatten` does this)"
ONE_OF_EACH = (
    "send one cluster, user and context: the output of "
    "`kubectl config view --minify --flatten --context <name>`"
)


@dataclass(frozen=True)
class Problem:
    """One refused field: its path in the kubeconfig, what is wrong, and what to do."""

    field: str
    problem: str
    fix: str


class KubeconfigRefused(KlutchError):
    """A tenant kubeconfig we do not accept; ``problems`` lists every refused field."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(
            "; ".join(f"{p.field}: {p.problem}" for p in problems),
            "; ".join(dict.fromkeys(p.fix for p in problems)),
        )
        self.problems = tuple(problems)


def refused(where: str, problem: str, fix: str) -> KubeconfigRefused:
    return KubeconfigRefused([Problem(where, problem, fix)])
