"""A command group whose commands are imported when it is used, not when its parent is.

``klutch-gitops dev`` (the local stack) must not load for ``klutch-gitops version`` or in a Pod,
so the root app names it by module and the group imports it on its first lookup.
"""

from __future__ import annotations

import importlib
from typing import ClassVar

import typer
import typer.main
from typer._click import Command, Context  # typer 0.29 vendors click
from typer.core import TyperGroup
from typer.models import TyperInfo


class LazyGroup(TyperGroup):
    """The subcommands of the Typer app at ``target`` (``module:attribute``)."""

    target: ClassVar[str]
    _loaded: TyperGroup | None = None

    def list_commands(self, ctx: Context) -> list[str]:
        return self.loaded().list_commands(ctx)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        return self.loaded().get_command(ctx, cmd_name)

    def loaded(self) -> TyperGroup:
        """The target's click group, imported on first use; its help is rendered as its parent
        renders this group's (``add_typer`` would pass the parent's markup mode down alike)."""
        if self._loaded is None:
            module, _, attribute = self.target.partition(":")
            app: typer.Typer = getattr(importlib.import_module(module), attribute)
            self._loaded = typer.main.get_group_from_info(
                TyperInfo(app),
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=self.rich_markup_mode,
                suggest_commands=self.suggest_commands,
            )
        return self._loaded


def lazy_typer(app_at: str, help_text: str) -> typer.Typer:
    """A Typer for ``add_typer`` whose commands are those of the app at ``app_at``; the parent's
    help lists it with ``help_text`` without importing it."""

    class Group(LazyGroup):
        target = app_at

    return typer.Typer(cls=Group, help=help_text, no_args_is_help=True)
