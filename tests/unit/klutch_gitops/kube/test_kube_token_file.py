from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from klutch_gitops.kube import client as kube
from klutch_gitops.kube.client import TokenFileReloader, api_client


def kubeconfig(tmp_path: Path, user: dict) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "in-cluster",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "in-cluster", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def bearer(api) -> str:
    return api.configuration.get_api_key_with_prefix("BearerToken")


def test_a_rotated_token_file_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("first")
    clock = [1000.0]
    monkeypatch.setattr(kube.time, "monotonic", lambda: clock[0])
    api = api_client(kubeconfig(tmp_path, {"tokenFile": "token"}))  # relative to the kubeconfig
    assert bearer(api) == "Bearer first"
    (tmp_path / "token").write_text("second\n")  # the kubelet rotated it
    clock[0] += TokenFileReloader.INTERVAL_SECONDS - 1
    assert bearer(api) == "Bearer first"  # not re-read on every request
    clock[0] += 2
    assert bearer(api) == "Bearer second"
    (tmp_path / "token").unlink()
    clock[0] += TokenFileReloader.INTERVAL_SECONDS
    assert bearer(api) == "Bearer second"  # an unreadable file keeps the last token


def test_a_literal_token_is_left_to_the_official_loader(tmp_path: Path) -> None:
    api = api_client(kubeconfig(tmp_path, {"token": "literal"}))
    assert not isinstance(api.configuration.refresh_api_key_hook, TokenFileReloader)
    assert bearer(api) == "Bearer literal"
