"""Dex and OpenLDAP configuration: groups come from the directory, secrets stay hashed."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from klutch_gitops.dev.localstack import dex, ldap

ALICE = ldap.User("alice@example.com", "alice", "s3cret-pass", ("team-a", "admins"))
BOB = ldap.User("bob@example.com", "bob", "other-pass", ("team-a",))


def check_ssha(value: str, password: str) -> bool:
    raw = base64.b64decode(value.removeprefix("{SSHA}"))
    digest, salt = raw[:20], raw[20:]
    return hashlib.sha1(password.encode() + salt).digest() == digest  # noqa: S324


def test_ssha_is_salted_and_verifiable() -> None:
    first, second = ldap.ssha("pw"), ldap.ssha("pw")
    assert first != second
    assert check_ssha(first, "pw")
    assert not check_ssha(first, "other")


def test_seed_has_people_and_one_group_entry_per_group_with_members() -> None:
    seed = ldap.render_seed((ALICE, BOB))
    entries = {e.splitlines()[0]: e for e in seed.split("\n\n")}
    team_a = entries[f"dn: cn=team-a,{ldap.GROUPS}"]
    assert f"member: {ldap.user_dn(ALICE)}" in team_a
    assert f"member: {ldap.user_dn(BOB)}" in team_a
    admins = entries[f"dn: cn=admins,{ldap.GROUPS}"]
    assert f"member: {ldap.user_dn(BOB)}" not in admins
    alice = entries[f"dn: {ldap.user_dn(ALICE)}"]
    assert "mail: alice@example.com" in alice
    assert "s3cret-pass" not in seed
    password = next(
        line.split(": ", 1)[1] for line in alice.splitlines() if line.startswith("userPassword")
    )
    assert check_ssha(password, "s3cret-pass")


def test_slapd_config_hides_passwords_and_hashes_the_admin_password(tmp_path: Path) -> None:
    config = ldap.render_config(
        ldap.LdapPaths(tmp_path), "admin-pw", Path("ca"), Path("c"), Path("k")
    )
    assert "admin-pw" not in config
    assert "access to attrs=userPassword by anonymous auth by * none" in config
    assert f"directory {tmp_path / 'data'}" in config


def test_dex_uses_the_directory_for_passwords_and_has_all_three_clients() -> None:
    connector = ldap.dex_connector(1636, "admin-pw", Path("/ca.crt"))
    config = dex.render(
        "https://127.0.0.1:1/dex",
        "127.0.0.1:1",
        Path("c"),
        Path("k"),
        connector,
        "client-secret",
        "web-secret",
        8443,
    )
    assert config["oauth2"]["passwordConnector"] == "ldap"
    assert config["connectors"] == [connector]
    assert connector["config"]["rootCA"] == "/ca.crt"
    assert "insecureNoSSL" not in connector["config"]
    clients = {c["id"]: c for c in config["staticClients"]}
    assert clients[dex.AUTOMATION_CLIENT]["secret"] == "client-secret"
    assert clients[dex.CLI_CLIENT]["public"] is True
    assert "secret" not in clients[dex.CLI_CLIENT]
    assert clients[dex.WEB_CLIENT]["secret"] == "web-secret"
    assert clients[dex.WEB_CLIENT]["redirectURIs"] == [
        "http://127.0.0.1:8443/callback",
        "https://127.0.0.1:8443/callback",
    ]
    assert {"password", dex.DEVICE_GRANT} <= set(config["oauth2"]["grantTypes"])
    assert config["web"]["https"] == "127.0.0.1:1"
