"""Certificates and keys for the local stack, made with ``cryptography``.

Two CAs, as in a real cluster: the serving CA signs the TLS certificates of every server on loopback
(kube-apiservers, controller managers, Dex), the client CA signs client certificates that the
kube-apiservers accept. Each cluster gets its own service-account signing key so a token of one
cluster is never accepted by the other. ECDSA P-256 keeps generation fast.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost", "127.0.0.1")
VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    """A key this module wrote: every key here is from ``new_key``."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"expected an EC private key, got {type(key).__name__}")
    return key


def public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def new_ca(common_name: str) -> KeyPair:
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    sans: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> KeyPair:
    """A leaf certificate signed by ``ca``; ``sans`` may mix DNS names and IP addresses."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = _load_key(ca.key_pem)
    key = new_key()
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    usages = [
        u
        for u, on in (
            (ExtendedKeyUsageOID.SERVER_AUTH, server),
            (ExtendedKeyUsageOID.CLIENT_AUTH, client),
        )
        if on
    ]
    builder = (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


@dataclass(frozen=True)
class Pki:
    """Paths of the files ``write_pki`` made; the CA keys stay on disk to issue more certs."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def serving_ca(self) -> Path:
        return self.path("serving-ca.crt")

    @property
    def serving_cert(self) -> Path:
        return self.path("serving.crt")

    @property
    def serving_key(self) -> Path:
        return self.path("serving.key")

    @property
    def client_ca(self) -> Path:
        return self.path("client-ca.crt")

    @property
    def admin_cert(self) -> Path:
        return self.path("admin.crt")

    @property
    def admin_key(self) -> Path:
        return self.path("admin.key")

    def sa_key(self, cluster: str) -> Path:
        return self.path(f"sa-{cluster}.key")

    def sa_pub(self, cluster: str) -> Path:
        return self.path(f"sa-{cluster}.pub")

    def load_client_ca(self) -> KeyPair:
        return KeyPair(self.client_ca.read_bytes(), self.path("client-ca.key").read_bytes())

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for ``user`` in ``groups`` (certificate organizations)."""
        return issue(self.load_client_ca(), user, organizations=groups, client=True)


def write_pki(directory: Path, clusters: tuple[str, ...]) -> Pki:
    """Make every key and certificate of the stack in ``directory`` (mode 0700, keys 0600)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    serving_ca = new_ca("klutch-gitops local serving CA")
    client_ca = new_ca("klutch-gitops local client CA")
    serving = issue(serving_ca, "klutch-gitops local server", sans=LOOPBACK_NAMES, server=True)
    admin = issue(client_ca, "admin", organizations=("system:masters",), client=True)
    files = {
        "serving-ca.crt": serving_ca.cert_pem,
        "serving-ca.key": serving_ca.key_pem,
        "client-ca.crt": client_ca.cert_pem,
        "client-ca.key": client_ca.key_pem,
        "serving.crt": serving.cert_pem,
        "serving.key": serving.key_pem,
        "admin.crt": admin.cert_pem,
        "admin.key": admin.key_pem,
    }
    for cluster in clusters:
        key = new_key()
        files[f"sa-{cluster}.key"] = key_pem(key)
        files[f"sa-{cluster}.pub"] = public_pem(key)
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600 if name.endswith(".key") else 0o644)
    return Pki(directory)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + VALIDITY)
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _san(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        return x509.DNSName(value)
