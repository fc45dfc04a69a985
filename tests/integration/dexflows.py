"""What a person and a script do with the real Dex: log in through its forms, get tokens."""

from __future__ import annotations

import re
import ssl
from html import unescape
from urllib.parse import urljoin

import httpx

from klutch_gitops.dev.localstack.stack import StackInfo


def browser(stack: StackInfo, follow_redirects: bool = False) -> httpx.Client:
    return httpx.Client(
        verify=ssl.create_default_context(cafile=stack.dex.ca),
        timeout=10.0,
        follow_redirects=follow_redirects,
    )


def form(page: httpx.Response) -> tuple[str, dict[str, str]]:
    """The first form of a page: its absolute action URL and its preset inputs."""
    found = re.search(r"<form[^>]*>(.*?)</form>", page.text, re.S | re.I)
    assert found, f"no form on {page.url}:\n{page.text[:2000]}"
    action = re.search(r'action="([^"]*)"', found.group(0))
    fields = {
        name: unescape(value)
        for name, value in re.findall(
            r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', found.group(1)
        )
    }
    return urljoin(str(page.url), unescape(action.group(1)) if action else ""), fields


def log_in_in_a_browser(url: str, stack: StackInfo) -> None:
    """Open the URL, submit whatever Dex asks first (a user code), then log in."""
    with browser(stack, follow_redirects=True) as http:
        page = http.get(url)
        while "password" not in page.text.lower() or "<form" not in page.text:
            action, fields = form(page)
            page = http.post(action, data=fields)
        action, fields = form(page)
        fields.update(login=stack.dex.email, password=stack.dex.password)
        done = http.post(action, data=fields)
        assert done.status_code == 200, done.text


def password_grant(
    oidc: httpx.Client, discovery: dict, stack: StackInfo, password: str | None = None
) -> httpx.Response:
    """The automation client's password grant for the dev user."""
    return oidc.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "password",
            "username": stack.dex.email,
            "password": stack.dex.password if password is None else password,
            "scope": "openid email profile groups offline_access",
        },
        auth=(stack.dex.automation_client_id, stack.dex.automation_client_secret),
    )
