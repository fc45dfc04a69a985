"""Argo CD's health check for the claims, run the way Argo CD runs it: by a real Lua 5.1
interpreter (gopher-lua is Lua 5.1), with the object as the global ``obj`` and without the
standard libraries Argo CD leaves out (string, math, io, debug, coroutine)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lupa import lua51

HEALTH_LUA = Path(__file__).resolve().parents[1] / "catalog" / "health" / "argocd" / "health.lua"
SANDBOX = """
debug.setmetatable("", nil)
string, math, io, debug, coroutine, os = nil, nil, nil, nil, nil, nil
"""


def argocd_health(obj: Mapping[str, Any], script: str | None = None) -> tuple[str, str]:
    """(status, message) that the health script returns for ``obj``."""
    lua = lua51.LuaRuntime()
    lua.execute(SANDBOX)
    lua.globals().obj = lua.table_from(dict(obj), recursive=True)
    result = lua.execute(script if script is not None else HEALTH_LUA.read_text())
    return result["status"], result["message"]
