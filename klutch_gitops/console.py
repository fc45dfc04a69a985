"""Terminal output shared by ``klutch-gitops`` and ``klutch-bind``.

Both consoles soft-wrap: paths, URLs and names must survive copy-paste even when output is not a
terminal. A ``KlutchError`` reaches a person as its message and fix on stderr, with exit code 1
and no traceback.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from klutch_gitops.errors import KlutchError

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def run_cli(app: typer.Typer) -> None:
    try:
        app()
    except KlutchError as error:
        err.print(f"[red]error:[/red] {escape(error.message)}")
        if error.fix:
            err.print(f"[yellow]fix:[/yellow] {escape(error.fix)}")
        raise SystemExit(1) from None
