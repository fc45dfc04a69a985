"""A throwaway OpenLDAP directory: the user store behind Dex, with people and their groups.

Dex's built-in password DB has no groups in the releases the module proxy serves, and bind
authorization is decided on OIDC groups, so the stack gives Dex what production setups often use: a
real LDAP server. Debian's slapd runs as a plain child process with a generated ``slapd.conf``,
speaks ldaps with the stack's serving certificate, and gets its entries from ``slapadd`` before it
starts.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klutch_gitops.dev.localstack.launcher import Launcher
from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.processes import Process
from klutch_gitops.errors import KlutchError

SUFFIX = "dc=klutch,dc=example"
ADMIN_DN = f"cn=admin,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
SCHEMAS = ("core", "cosine", "inetorgperson")
SLAPD_SEARCH_PATH = "/usr/sbin:/usr/local/sbin"


@dataclass(frozen=True)
class User:
    email: str
    username: str
    password: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class LdapPaths:
    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / "slapd.conf"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def seed(self) -> Path:
        return self.directory / "seed.ldif"


def programs() -> dict[str, Path]:
    """slapd and slapadd from Debian's ``slapd`` package, or an error naming the fix."""
    found = {
        name: shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SLAPD_SEARCH_PATH}")
        for name in ("slapd", "slapadd")
    }
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise KlutchError(
            f"OpenLDAP programs not found: {', '.join(missing)}",
            "run 'make setup' (it installs Debian's slapd package), or 'apt-get install slapd'",
        )
    return {name: Path(path) for name, path in found.items() if path}


def ssha(password: str) -> str:
    """An RFC 2307 ``{SSHA}`` userPassword value (salted, so equal passwords hash differently)."""
    salt = os.urandom(8)
    digest = hashlib.sha1(password.encode() + salt, usedforsecurity=True).digest()  # noqa: S324
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def user_dn(user: User) -> str:
    return f"uid={user.username},{PEOPLE}"


def render_config(
    paths: LdapPaths,
    admin_password: str,
    ca: Path,
    cert: Path,
    key: Path,
    schema_dir: Path = Path("/etc/ldap/schema"),
    module_dir: Path = Path("/usr/lib/ldap"),
) -> str:
    """slapd.conf: one mdb database; passwords readable by nobody, entries by bound users only."""
    includes = "".join(f"include {schema_dir / name}.schema\n" for name in SCHEMAS)
    return f"""{includes}
modulepath {module_dir}
moduleload back_mdb
pidfile {paths.directory / "slapd.pid"}
argsfile {paths.directory / "slapd.args"}
TLSCACertificateFile {ca}
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}

database mdb
maxsize 104857600
suffix "{SUFFIX}"
rootdn "{ADMIN_DN}"
rootpw {ssha(admin_password)}
directory {paths.data}
access to attrs=userPassword by anonymous auth by * none
access to * by users read by * none
"""


def render_seed(users: tuple[User, ...]) -> str:
    """The directory's entries: the base, people with hashed passwords, one group per name."""
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: klutch\n"
        "o: klutch-gitops local stack\n",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for user in users:
        entries.append(
            f"dn: {user_dn(user)}\nobjectClass: inetOrgPerson\nuid: {user.username}\n"
            f"cn: {user.username}\nsn: {user.username}\nmail: {user.email}\n"
            f"userPassword: {ssha(user.password)}\n"
        )
    for group in sorted({g for user in users for g in user.groups}):
        members = "".join(f"member: {user_dn(u)}\n" for u in users if group in u.groups)
        entries.append(
            f"dn: cn={group},{GROUPS}\nobjectClass: groupOfNames\ncn: {group}\n{members}"
        )
    return "\n".join(entries)


def dex_connector(port: int, admin_password: str, ca: Path) -> dict[str, Any]:
    """Dex's LDAP connector for this directory: log in by email, groups by membership."""
    return {
        "type": "ldap",
        "id": "ldap",
        "name": "klutch-gitops local directory",
        "config": {
            "host": f"127.0.0.1:{port}",
            "rootCA": str(ca),
            "bindDN": ADMIN_DN,
            "bindPW": admin_password,
            "usernamePrompt": "Email address",
            "userSearch": {
                "baseDN": PEOPLE,
                "filter": "(objectClass=inetOrgPerson)",
                "username": "mail",
                "idAttr": "uid",
                "emailAttr": "mail",
                "nameAttr": "cn",
                "preferredUsernameAttr": "uid",
            },
            "groupSearch": {
                "baseDN": GROUPS,
                "filter": "(objectClass=groupOfNames)",
                "userMatchers": [{"userAttr": "DN", "groupAttr": "member"}],
                "nameAttr": "cn",
            },
        },
    }


def start_slapd(
    launcher: Launcher,
    bins: dict[str, Path],
    pki: Pki,
    paths: LdapPaths,
    port: int,
    admin_password: str,
    user: User,
) -> Process:
    """Load the directory offline with slapadd, then serve it over ldaps."""
    paths.data.mkdir(parents=True, mode=0o700)
    paths.config.touch(mode=0o600)
    paths.config.write_text(
        render_config(paths, admin_password, pki.serving_ca, pki.serving_cert, pki.serving_key)
    )
    paths.seed.touch(mode=0o600)
    paths.seed.write_text(render_seed((user,)))
    loaded = subprocess.run(
        [str(bins["slapadd"]), "-f", str(paths.config), "-l", str(paths.seed)],
        capture_output=True,
        text=True,
        check=False,
    )
    if loaded.returncode != 0:
        raise KlutchError(
            f"slapadd could not load the LDAP directory:\n{loaded.stderr}",
            f"check {paths.config} and {paths.seed}",
        )
    return launcher.spawn(
        "slapd",
        [
            str(bins["slapd"]),
            "-d",
            "0",
            "-f",
            str(paths.config),
            "-h",
            f"ldaps://127.0.0.1:{port}/",
        ],
    )
