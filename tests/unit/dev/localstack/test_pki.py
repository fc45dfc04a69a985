from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from klutch_gitops.dev.localstack.pki import new_ca, write_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):
    return write_pki(tmp_path_factory.mktemp("pki"), ("app", "control-plane"))


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_serving_cert_verifies_for_loopback_names(pki) -> None:
    store = Store([cert(pki.serving_ca)])
    for name in (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))):
        PolicyBuilder().store(store).build_server_verifier(name).verify(cert(pki.serving_cert), [])
    with pytest.raises(VerificationError):
        PolicyBuilder().store(store).build_server_verifier(x509.DNSName("example.com")).verify(
            cert(pki.serving_cert), []
        )


def test_admin_is_a_system_masters_client_of_the_client_ca_only(pki) -> None:
    admin = cert(pki.admin_cert)
    assert admin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters"
    ]
    admin.verify_directly_issued_by(cert(pki.client_ca))
    with pytest.raises(ValueError, match="subject does not match"):
        admin.verify_directly_issued_by(cert(pki.serving_ca))
    impostor = new_ca("klutch-gitops local client CA")  # same name, other key
    with pytest.raises(InvalidSignature):
        admin.verify_directly_issued_by(x509.load_pem_x509_certificate(impostor.cert_pem))


def test_issued_client_cert_carries_user_and_groups(pki) -> None:
    issued = pki.client_cert("alice", groups=("team-a", "devs"))
    subject = x509.load_pem_x509_certificate(issued.cert_pem).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert {a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)} == {
        "team-a",
        "devs",
    }


def test_each_cluster_has_its_own_service_account_key_pair(pki) -> None:
    keys = {}
    for cluster in ("app", "control-plane"):
        private = serialization.load_pem_private_key(pki.sa_key(cluster).read_bytes(), None)
        public = serialization.load_pem_public_key(pki.sa_pub(cluster).read_bytes())
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        assert private.public_key().public_numbers() == public.public_numbers()
        keys[cluster] = public.public_numbers()
    assert keys["app"] != keys["control-plane"]


def test_private_keys_are_owner_only(pki) -> None:
    keys = list(pki.directory.glob("*.key"))
    assert len(keys) == 6
    assert {oct(k.stat().st_mode & 0o777) for k in keys} == {"0o600"}
    assert oct(pki.directory.stat().st_mode & 0o777) == "0o700"


def test_ca_is_a_ca() -> None:
    ca = x509.load_pem_x509_certificate(new_ca("x").cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
