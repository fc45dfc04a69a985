"""The ``klutch-bind`` command line (also usable as the kubectl plugin ``kubectl-klutch_bind``).

The bind commands (login, exports, bind, status, unbind) arrive with the bind API; until then the
command answers ``--version`` and explains what it is for.
"""

from __future__ import annotations

import typer

from klutch_gitops import __version__

app = typer.Typer(
    help="Bind an App Cluster and a Git repository to Klutch data-service APIs.",
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


def main() -> None:
    app()
