"""Whether the ``server`` extra is installed, for the commands that need it.

``pip install klutch-gitops`` (and ``klutch-bind``) bring only what the laptop commands import;
the reconciler (``run``), the bind API (``bind-api``), ``plan`` and the local provider import
FastAPI, GitPython, watchfiles and the rest of ``klutch-gitops[server]``. Without the extra those
commands would die on a ModuleNotFoundError traceback; this names the fix instead. The list comes
from the installed distribution's own metadata, so it cannot drift from pyproject.toml.
"""

from __future__ import annotations

import re
from importlib import metadata

from klutch_gitops.errors import KlutchError

DISTRIBUTION = "klutch-gitops"
EXTRA = "server"
INSTALL = f"pip install '{DISTRIBUTION}[{EXTRA}]'"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str = EXTRA) -> list[str]:
    """The distribution names ``klutch-gitops[extra]`` adds, from the installed METADATA."""
    names = []
    for requirement in metadata.requires(DISTRIBUTION) or []:
        _, _, marker = requirement.partition(";")
        match = _NAME.match(requirement.strip())
        if match and extra in _EXTRA_MARKER.findall(marker):
            names.append(match.group(0))
    return names


def missing(extra: str = EXTRA) -> list[str]:
    """Which of the extra's distributions are not installed."""
    absent = []
    for name in extra_requirements(extra):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def require_server(command: str) -> None:
    """Raise the KlutchError naming the install command when the server extra is missing."""
    absent = missing()
    if absent:
        raise KlutchError(
            f"klutch-gitops {command} needs the '{EXTRA}' extra; not installed: "
            f"{', '.join(absent)}",
            f"{INSTALL} (with pipx: pipx install '{DISTRIBUTION}[{EXTRA}]')",
        )
