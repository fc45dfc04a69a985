"""ssh key and known_hosts files the resolver writes for a registration's Git credentials."""

from __future__ import annotations

import stat
from pathlib import Path

from reconciler.sync.connection import Resolver


def test_key_files_are_owner_only_and_reused_across_restarts(tmp_path: Path) -> None:
    resolver = Resolver(admin=None, secrets_dir=tmp_path / "secrets")  # type: ignore[arg-type]
    first = resolver._private_file("ssh-key", "KEY")
    again = resolver._private_file("ssh-key", "KEY\n")  # a restart of the same binding
    other = resolver._private_file("ssh-key", "ANOTHER KEY")
    assert first == again != other
    assert first.read_text() == "KEY\n"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "secrets").iterdir()) == ["ssh", "ssh"]
