"""The ``klutch-bind`` command line (also usable as the kubectl plugin ``kubectl-klutch_bind``).

``login`` obtains OIDC tokens for the bind API (device flow or browser flow with PKCE) and caches
them; ``token`` hands a fresh ID token to scripts; ``logout`` revokes them at the issuer (RFC 7009,
where offered) and forgets them. ``exports``, ``bind``, ``status`` and ``unbind`` call the bind
API with that token (or ``--token``) and keep the App Cluster's side of a binding
(``klutch-bind`` Namespace, kubeconfig Secret, APIServiceBindings) in step, or write it as YAML
for Git with ``--gitops-out`` (never the Secret).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import webbrowser
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape

from klutch_gitops import __version__, oidc_client
from klutch_gitops.bind import client as bind_client
from klutch_gitops.bind.client import BindClient
from klutch_gitops.console import err, out, run_cli
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import NAMESPACES, SECRETS, Kube, KubeError, api_client
from klutch_gitops.urls import normalize_repo_url, redact

app = typer.Typer(
    help="Bind an App Cluster and a Git repository to Klutch data-service APIs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


Issuer = Annotated[str, typer.Option("--issuer", help="The OIDC issuer URL of the bind API.")]


def main() -> None:
    run_cli(app)


@app.callback(invoke_without_command=True)
def root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


def headless() -> bool:
    """No browser can be opened here: stdin is not a terminal, or Linux without a display."""
    no_display = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return not sys.stdin.isatty() or (sys.platform.startswith("linux") and no_display)


@app.command()
def login(
    issuer: Issuer,
    client_id: Annotated[str, typer.Option("--client-id", help="The public OIDC client.")],
    ca: Annotated[
        str | None, typer.Option("--ca", help="CA bundle for the issuer's TLS certificate.")
    ] = None,
    browser: Annotated[
        bool | None,
        typer.Option(
            "--browser/--device",
            help="Browser flow with PKCE, or device flow (default: device when headless).",
            show_default=False,
        ),
    ] = None,
    scopes: Annotated[str, typer.Option("--scopes")] = oidc_client.DEFAULT_SCOPES,
    callback_port: Annotated[
        int,
        typer.Option(
            "--callback-port",
            help="Browser flow: port of the callback on localhost; 0 picks a free one (RFC 8252).",
        ),
    ] = 0,
) -> None:
    """Log in to the issuer and cache the tokens (owner-only) for the other commands."""
    use_browser = not headless() if browser is None else browser
    with oidc_client.http_client(ca) as http:
        provider = oidc_client.discover(http, issuer)
        if use_browser:
            body = oidc_client.browser_login(
                http, provider, client_id, scopes, _open_browser, port=callback_port
            )
        else:
            device = oidc_client.start_device_authorization(http, provider, client_id, scopes)
            _show_device_code(device)
            with err.status("waiting for the login to be approved…"):
                body = oidc_client.poll_device_token(http, provider, client_id, device)
    tokens = oidc_client.tokens_from_response(issuer, client_id, ca, body)
    path = oidc_client.save(tokens)
    who = oidc_client.unverified_claims(tokens.id_token).get("email", "the issuer")
    out.print(f"[green]logged in[/green] as {escape(str(who))}; tokens cached in {path}")


def _show_device_code(device: oidc_client.DeviceCode) -> None:
    err.print(f"open      {device.verification_uri}")
    err.print(f"and enter [bold]{escape(device.user_code)}[/bold]")
    if device.verification_uri_complete:
        err.print(f"or open   {device.verification_uri_complete}")


def _open_browser(url: str) -> None:
    err.print(f"opening the browser; if it does not open, visit:\n{url}")
    webbrowser.open(url)


@app.command()
def logout(issuer: Issuer) -> None:
    """Revoke the refresh tokens at the issuer where it supports RFC 7009, then forget them."""
    entries = oidc_client.cached(issuer)
    if not entries:
        out.print(f"not logged in to {issuer}")
        return
    with oidc_client.http_client(entries[0].ca) as http:
        provider = oidc_client.discover(http, issuer)
        revoked = [oidc_client.revoke(http, provider, tokens) for tokens in entries]
    oidc_client.remove(issuer)
    if all(revoked):
        out.print(f"logged out of {issuer}; the refresh token was revoked at the issuer")
    elif provider.revocation_endpoint is None:
        out.print(
            f"logged out of {issuer} here; the issuer does not support token revocation (its "
            "discovery document names no revocation_endpoint, RFC 7009), so the refresh token "
            "stays valid there until it expires or an administrator revokes it"
        )
    else:
        out.print(f"logged out of {issuer}; there was no refresh token to revoke")


@app.command()
def token(
    issuer: Issuer,
    client_id: Annotated[
        str | None, typer.Option("--client-id", help="Needed when logged in with several.")
    ] = None,
) -> None:
    """Print a fresh ID token (refreshed if it expires within 60 s), for scripts."""
    typer.echo(oidc_client.fresh_id_token(issuer, client_id, min_valid=60))


# --- bindings ------------------------------------------------------------------------------------


class Output(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


Url = Annotated[str, typer.Argument(help="The bind API's base URL, e.g. https://bind.example.com")]
OptionalIssuer = Annotated[
    str | None,
    typer.Option("--issuer", help="OIDC issuer whose cached login token to use (see 'login')."),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="KLUTCH_BIND_TOKEN", help="An ID token to use instead (automation)."
    ),
]
ClientId = Annotated[
    str | None, typer.Option("--client-id", help="Needed when logged in with several clients.")
]
Ca = Annotated[str | None, typer.Option("--ca", help="CA bundle for the bind API's TLS.")]
OutputOption = Annotated[Output, typer.Option("-o", "--output")]
Kubeconfig = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig of the App Cluster.")
]
Context = Annotated[str | None, typer.Option("--context", help="Context in the kubeconfig.")]
GIT_PASSWORD_ENV = "KLUTCH_GIT_PASSWORD"  # noqa: S105 - the variable's name, not a password


def bearer_token(issuer: str | None, token: str | None, client_id: str | None) -> str:
    """``--token`` as given, or the cached login of ``--issuer`` (refreshed when due)."""
    if token:
        return token
    if not issuer:
        raise KlutchError(
            "no token: pass --issuer (after 'klutch-bind login') or --token",
            'e.g. --issuer https://dex.example.com, or --token "$(klutch-bind token --issuer …)"',
        )
    return oidc_client.fresh_id_token(issuer, client_id, min_valid=60)


def _client(
    url: str, issuer: str | None, token: str | None, client_id: str | None, ca: str | None
) -> BindClient:
    return BindClient(url, bearer_token(issuer, token, client_id), ca=ca)


def _emit(data: Any, output: Output) -> bool:
    """Print ``data`` as JSON or YAML and return True; False means: print text instead."""
    if output is Output.json:
        out.print_json(json.dumps(data))
    elif output is Output.yaml:
        out.print(yaml.safe_dump(data, sort_keys=False), end="")
    return output is not Output.text


@app.command()
def exports(
    url: Url,
    issuer: OptionalIssuer = None,
    token: Token = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """List the APIs the bind API offers, and whether you may bind them."""
    with _client(url, issuer, token, client_id, ca) as api:
        items = api.exports()
    if _emit({"exports": items}, output):
        return
    rows = [
        [
            item["api"],
            "yes" if item.get("allowed") else "no",
            str(len(item.get("permissionClaims") or [])),
            str(item.get("reason", "")),
        ]
        for item in items
    ]
    _print_table(["API", "ALLOWED", "CLAIMS", "REASON"], rows)


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    """kubectl-style columns, never wrapped: names and IDs must survive copy-paste."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        line = "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.print(escape(line.rstrip()))


def confirmation_needed(yes: bool, interactive: bool) -> bool:
    """Whether to ask; without a terminal to ask on, ``--yes`` is required."""
    if yes:
        return False
    if not interactive:
        raise KlutchError(
            "binding grants permission claims and needs confirmation, but there is no terminal",
            "pass --yes to accept the listed permission claims",
        )
    return True


def claims_for(offered: list[dict[str, Any]], apis: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The permission claims of each requested API; unknown or refused APIs are errors."""
    by_api = {item["api"]: item for item in offered}
    unknown = [api for api in apis if api not in by_api]
    if unknown:
        raise KlutchError(
            f"not offered: {', '.join(unknown)}; offered: {', '.join(sorted(by_api)) or 'none'}",
            "run 'klutch-bind exports <url>' and pick from the list",
        )
    refused = [
        f"{api}: {by_api[api].get('reason', '')}" for api in apis if not by_api[api]["allowed"]
    ]
    if refused:
        raise KlutchError(
            f"not allowed to bind {'; '.join(refused)}",
            "ask the platform team for membership in an allowed group",
        )
    return {api: list(by_api[api].get("permissionClaims") or []) for api in apis}


def _show_claims(claims_by_api: dict[str, list[dict[str, Any]]]) -> None:
    for api, claims in claims_by_api.items():
        err.print(
            f"[bold]{escape(api)}[/bold] asks for these permission claims on the App Cluster:"
        )
        for claim in claims or []:
            err.print(f"  - {escape(bind_client.describe_claim(claim))}")
        if not claims:
            err.print("  (none)")


def _app_kube(kubeconfig: Path | None, context: str | None) -> Kube:
    """The App Cluster: ``--kubeconfig``, else $KUBECONFIG or ~/.kube/config like kubectl."""
    from kubernetes import config

    try:
        if kubeconfig is not None:
            return Kube(api_client(kubeconfig, context))
        return Kube(config.new_client_from_config(context=context))
    except (OSError, config.ConfigException) as error:
        raise KlutchError(
            f"cannot load the App Cluster kubeconfig: {error}", "check --kubeconfig and --context"
        ) from None


def _cluster_id(kube: Kube | None) -> str:
    """kube-bind's cluster identity: the UID of the App Cluster's kube-system namespace."""
    system = kube.get(NAMESPACES, None, "kube-system") if kube else None
    if not system:
        raise KlutchError(
            "cannot tell the App Cluster's identity", "pass --cluster-id, or --kubeconfig"
        )
    return system["metadata"]["uid"]


def _app_kubeconfig(kubeconfig: Path | None, context: str | None) -> str:
    """The App kubeconfig for the bind API's reconciler: one context, credentials inlined."""
    if kubeconfig is None:
        raise KlutchError(
            "a repository binding needs the App Cluster kubeconfig for the reconciler",
            "pass --kubeconfig with --repo",
        )
    text = _read_text(kubeconfig, "--kubeconfig")
    return minified_kubeconfig(text, context, kubeconfig.parent, str(kubeconfig))


_INLINED = {
    "cluster": (("certificate-authority", "certificate-authority-data"),),
    "user": (("client-certificate", "client-certificate-data"), ("client-key", "client-key-data")),
}


def minified_kubeconfig(text: str, context: str | None, base: Path, origin: str) -> str:
    """Only ``context`` (default: the current one), its cluster and user, with every file the
    reconciler could not read inlined, like ``kubectl config view --minify --flatten``.

    The other contexts' credentials never leave the machine; an exec or auth-provider user cannot
    work in the reconciler and is refused with what to use instead.
    """
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KlutchError(f"{origin} is not YAML: {error}", "check --kubeconfig") from None
    config = config if isinstance(config, dict) else {}
    name = context or config.get("current-context")
    named = {
        kind: {e.get("name"): dict(e.get(kind) or {}) for e in config.get(f"{kind}s") or []}
        for kind in ("context", "cluster", "user")
    }
    if name not in named["context"]:
        raise KlutchError(
            f"{origin} has no context {name!r}",
            f"pass --context with one of: {', '.join(map(str, named['context'])) or 'none'}",
        )
    entry = named["context"][name]
    picked: dict[str, dict[str, Any]] = {}
    for kind in ("cluster", "user"):
        ref = entry.get(kind)
        if ref not in named[kind]:
            raise KlutchError(
                f"{origin}: context {name!r} names {kind} {ref!r}, which it does not define",
                "check --kubeconfig and --context",
            )
        picked[kind] = _inline(named[kind][ref], _INLINED[kind], base)
    user = picked["user"]
    if "exec" in user or "auth-provider" in user:
        raise KlutchError(
            f"{origin}: user {entry['user']!r} of context {name!r} logs in through a plugin, "
            "which the reconciler cannot run",
            "pass a kubeconfig whose user has a token or a client certificate for the App Cluster",
        )
    if "tokenFile" in user:
        user["token"] = _read_text(base / user.pop("tokenFile"), "the user's tokenFile").strip()
    minified = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": entry["cluster"], "cluster": picked["cluster"]}],
        "users": [{"name": entry["user"], "user": user}],
        "contexts": [{"name": name, "context": entry}],
        "current-context": name,
    }
    return yaml.safe_dump(minified, sort_keys=False)


def _inline(
    section: dict[str, Any], fields: tuple[tuple[str, str], ...], base: Path
) -> dict[str, Any]:
    """``section`` with each file field replaced by its base64 ``-data`` field."""
    for file_field, data_field in fields:
        if file_field in section:
            path = base / section.pop(file_field)  # relative to the kubeconfig, as kubectl does
            try:
                content = path.read_bytes()
            except OSError as error:
                raise KlutchError(
                    f"cannot read {path} ({file_field} in the kubeconfig): {error.strerror}",
                    "check the kubeconfig's file references",
                ) from None
            section[data_field] = base64.b64encode(content).decode()
    return section


def _read_text(path: Path, what: str) -> str:
    """A file's text (``-`` reads stdin), or a KlutchError naming the option."""
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        raise KlutchError(
            f"cannot read {what} {path}: {error.strerror or error}", f"check {what}"
        ) from None


CREDENTIALS_FIX = (
    f"pass the user with --git-username and the password or token through ${GIT_PASSWORD_ENV} "
    "or --git-password-file, never on the command line"
)


def repository_body(
    repo: str | None,
    branch: str,
    path: str,
    namespaces: list[str] | None,
    credentials: dict[str, str],
) -> dict[str, Any] | None:
    """The ``repository`` of a bind request, or None; refused before anything is created."""
    if repo is None:
        return None
    if not namespaces:
        raise KlutchError(
            "--repo needs the App namespaces whose claims the repository holds",
            "pass --namespace NS (repeatable)",
        )
    if redact(repo) != repo:
        raise KlutchError(f"--repo {redact(repo)} carries credentials in the URL", CREDENTIALS_FIX)
    normalize_repo_url(repo)  # a URL naming no repository is refused with the forms to use
    return {
        "url": repo,
        "branch": branch,
        "path": path,
        "appNamespaces": namespaces,
        **credentials,
    }


def git_credentials(
    username: str | None,
    password_file: Path | None,
    ssh_key: Path | None,
    known_hosts: Path | None,
) -> dict[str, str]:
    """The request's credential fields; the password comes from a file, stdin or the
    environment ($KLUTCH_GIT_PASSWORD), so it never appears in a command line or shell history."""
    password = os.environ.get(GIT_PASSWORD_ENV) or None
    if password_file is not None:
        password = _read_text(password_file, "--git-password-file").rstrip("\r\n")
    values = {
        "username": username,
        "password": password,
        "sshPrivateKey": _read_text(ssh_key, "--ssh-private-key") if ssh_key else None,
        "knownHosts": _read_text(known_hosts, "--known-hosts") if known_hosts else None,
    }
    return {key: value for key, value in values.items() if value}


def apply_app_objects(kube: Kube, objects: list[tuple[Any, dict[str, Any]]]) -> list[str]:
    """Server-side apply (field manager ``klutch-bind``); returns ``kind/namespace/name``."""
    applied = []
    for resource, obj in objects:
        try:
            kube.apply(resource, obj, field_manager=bind_client.FIELD_MANAGER, force=True)
        except KubeError as error:
            fix = "check the kubeconfig's permissions in the App Cluster"
            if error.not_found and resource is bind_client.SERVICE_BINDINGS:
                fix = "install the APIServiceBinding CRD in the App Cluster"
            raise KlutchError(
                f"cannot apply {obj['kind']} {obj['metadata']['name']}: {error}", fix
            ) from None
        applied.append(_ref(obj))
    return applied


def write_gitops(directory: Path, files: dict[str, dict[str, Any] | str]) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        (directory / name).write_text(text)
        written.append(str(directory / name))
    return written


def _ref(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "/".join(p for p in (obj["kind"], meta.get("namespace"), meta["name"]) if p)


@app.command("bind")
def bind_command(
    url: Url,
    api_names: Annotated[
        list[str], typer.Option("--api", help="An API to bind, <plural>.<group>; repeatable.")
    ],
    cluster_id: Annotated[
        str | None,
        typer.Option("--cluster-id", help="App Cluster identity (default: kube-system's UID)."),
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="Also bind this Git repository of claims.")
    ] = None,
    branch: Annotated[
        str, typer.Option("--branch", help="Branch the reconciler follows.")
    ] = "main",
    path: Annotated[str, typer.Option("--path", help="Claims directory in the repo.")] = ".",
    namespaces: Annotated[
        list[str] | None,
        typer.Option("--namespace", help="App namespace the repository manages; repeatable."),
    ] = None,
    git_username: Annotated[
        str | None, typer.Option("--git-username", help="User for an https repository.")
    ] = None,
    git_password_file: Annotated[
        Path | None,
        typer.Option(
            "--git-password-file",
            help="File holding the Git password or token ('-' reads stdin); or set "
            f"${GIT_PASSWORD_ENV}. Never on the command line.",
        ),
    ] = None,
    ssh_key: Annotated[
        Path | None, typer.Option("--ssh-private-key", help="SSH key file for an ssh repository.")
    ] = None,
    known_hosts: Annotated[
        Path | None, typer.Option("--known-hosts", help="known_hosts file for the SSH host.")
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accept the permission claims.")] = False,
    gitops_out: Annotated[
        Path | None,
        typer.Option(
            "--gitops-out", help="Write the App objects as YAML here instead (no Secret)."
        ),
    ] = None,
    issuer: OptionalIssuer = None,
    token: Token = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """Bind APIs (and optionally a repository) for an App Cluster, after confirming the claims."""
    credentials = git_credentials(git_username, git_password_file, ssh_key, known_hosts)
    repository = repository_body(repo, branch, path, namespaces, credentials)
    app_kubeconfig = _app_kubeconfig(kubeconfig, context) if repository is not None else None
    direct = gitops_out is None or kubeconfig is not None or context is not None
    kube = _app_kube(kubeconfig, context) if direct else None
    with _client(url, issuer, token, client_id, ca) as api:
        claims_by_api = claims_for(api.exports(), api_names)
        _show_claims(claims_by_api)
        if confirmation_needed(yes, sys.stdin.isatty()) and not typer.confirm(
            "Accept these permission claims and bind?", err=True
        ):
            raise typer.Exit(1)
        body: dict[str, Any] = {"clusterId": cluster_id or _cluster_id(kube), "apis": api_names}
        if repository is not None:
            body["repository"] = repository
            body["appKubeconfig"] = app_kubeconfig
        result = api.bind(body)
    consumer = result["consumerNamespace"]
    bound = {a: claims_by_api[a] for a in result.get("exports") or [] if a in claims_by_api}
    objects = bind_client.app_objects(consumer, result["kubeconfig"], bound)
    report: dict[str, Any] = {k: v for k, v in result.items() if k != "kubeconfig"}
    if gitops_out is not None:
        files = bind_client.gitops_files(consumer, bound)
        report["written"] = write_gitops(gitops_out, files)
        objects = objects[:2]  # the Namespace and the Secret go to the cluster, never to Git
    report["applied"] = apply_app_objects(kube, objects) if kube else []
    _report_bind(report, output)
    failed = {a: p for a, p in (result.get("phases") or {}).items() if a not in bound}
    if failed:
        raise KlutchError(
            f"not bound: {', '.join(f'{a} ({p})' for a, p in failed.items())}",
            "check the export requests in the consumer namespace on the Control Plane",
        )


def _report_bind(report: dict[str, Any], output: Output) -> None:
    if _emit(report, output):
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


@app.command("status")
def status_command(
    url: Url,
    issuer: OptionalIssuer = None,
    token: Token = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """List your bindings."""
    with _client(url, issuer, token, client_id, ca) as api:
        items = api.bindings()
    if _emit({"bindings": items}, output):
        return
    if not items:
        out.print("no bindings")
        return
    rows = [
        [
            item["consumerNamespace"],
            item.get("clusterId") or "",
            ", ".join(
                f"{r['url']}@{r.get('branch') or 'main'}:{r.get('path') or '.'}"
                for r in item.get("repositories") or []
            ),
            item.get("created") or "",
        ]
        for item in items
    ]
    _print_table(["CONSUMER NAMESPACE", "CLUSTER ID", "REPOSITORIES", "CREATED"], rows)


@app.command("unbind")
def unbind_command(
    url: Url,
    consumer: Annotated[str, typer.Argument(help="The consumer namespace (see 'status').")],
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    issuer: OptionalIssuer = None,
    token: Token = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """Remove a binding; with --kubeconfig also its App Cluster objects."""
    with _client(url, issuer, token, client_id, ca) as api:
        api.unbind(consumer)
    removed = remove_app_objects(_app_kube(kubeconfig, context), consumer) if kubeconfig else []
    if _emit({"consumerNamespace": consumer, "removed": removed}, output):
        return
    out.print(f"[green]unbound[/green] {consumer}")
    for ref in removed:
        out.print(f"  removed  {ref}")


def remove_app_objects(kube: Kube, consumer: str) -> list[str]:
    """Delete the consumer's APIServiceBindings and kubeconfig Secret from the App Cluster."""
    try:
        return _remove(kube, consumer)
    except KubeError as error:
        raise KlutchError(
            f"unbound on the Control Plane, but cannot clean up the App Cluster: {error}",
            "check the kubeconfig's permissions on APIServiceBindings (cluster-wide) and on "
            "Secrets in namespace klutch-bind, then unbind again",
        ) from None


def _remove(kube: Kube, consumer: str) -> list[str]:
    namespace = bind_client.BIND_NAMESPACE
    try:
        items, _ = kube.list(bind_client.SERVICE_BINDINGS)
    except KubeError as error:
        if not error.not_found:  # no CRD: no bindings
            raise
        items = []
    removed = []
    for name in bind_client.bindings_of(consumer, items):
        # Orphan: the App CRD may be owned by the binding (the konnector's ownership model), and
        # its deletion would take every App claim of that kind with it.
        if kube.delete(bind_client.SERVICE_BINDINGS, None, name, propagation="Orphan"):
            removed.append(f"APIServiceBinding/{name}")
    secret = bind_client.secret_name(consumer)
    if kube.delete(SECRETS, namespace, secret):
        removed.append(f"Secret/{namespace}/{secret}")
    return removed


if __name__ == "__main__":
    main()
