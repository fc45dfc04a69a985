"""How ``klutch-bind`` prints: JSON or YAML for scripts, else kubectl-style text that survives
copy-paste."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import yaml
from rich.markup import escape

from klutch_gitops.bind import client as bind_client
from klutch_gitops.console import err, out


class Output(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


def emit(data: Any, output: Output) -> bool:
    """Print ``data`` as JSON or YAML and return True; False means: print text instead."""
    if output is Output.json:
        out.print_json(json.dumps(data))
    elif output is Output.yaml:
        out.print(yaml.safe_dump(data, sort_keys=False), end="")
    return output is not Output.text


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """kubectl-style columns, never wrapped: names and IDs must survive copy-paste."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        line = "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.print(escape(line.rstrip()))


def show_claims(claims_by_api: dict[str, list[dict[str, Any]]]) -> None:
    for api, claims in claims_by_api.items():
        err.print(
            f"[bold]{escape(api)}[/bold] asks for these permission claims on the App Cluster:"
        )
        for claim in claims or []:
            err.print(f"  - {escape(bind_client.describe_claim(claim))}")
        if not claims:
            err.print("  (none)")


def print_bind_report(report: dict[str, Any], output: Output) -> None:
    if emit(report, output):
        return
    out.print(f"[green]bound[/green] consumer namespace {report['consumerNamespace']}")
    for api, phase in (report.get("phases") or {}).items():
        out.print(f"  export   {api}: {phase}")
    if report.get("repositoryBinding"):
        out.print(f"  repository binding {report['repositoryBinding']}")
    for ref in report.get("applied") or []:
        out.print(f"  applied  {ref}")
    for path in report.get("written") or []:
        out.print(f"  wrote    {path}")
