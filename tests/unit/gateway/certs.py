"""Test PKI generated at run time with ``cryptography``: CAs, server and client certificates.

``make_pki(tmp_dir)`` writes PEM files and returns their paths.  Keys are
EC P-256 (fast to generate and to handshake with); nothing is cached on disk
between test sessions.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "Pki", "make_ca", "issue", "make_pki"]

_NOW = datetime.datetime.now(datetime.timezone.utc)


@dataclass(frozen=True)
class Issued:
    """A key and its certificate, in memory and as PEM files."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Pki:
    ca: Issued
    other_ca: Issued
    server: Issued
    client: Issued
    """Client certificate issued by ``ca``: CN=alice,OU=apps,O=Example,C=US."""
    rogue_client: Issued
    """Client certificate with the same subject, issued by ``other_ca``."""


def _name(**attrs: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME}
    # Written most-significant first (C, O, OU, CN): RFC 2253 text reads CN=…,OU=…,O=…,C=…
    order = ["C", "O", "OU", "CN"]
    return x509.Name([x509.NameAttribute(oids[k], attrs[k]) for k in order if k in attrs])


def _write(directory: Path, stem: str, key, cert: x509.Certificate) -> Issued:
    cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return Issued(key, cert, cert_file, key_file)


def make_ca(directory: Path, stem: str, common_name: str) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(CN=common_name, O="kgw tests")
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1)).not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, stem, key, cert)


def issue(directory: Path, stem: str, ca: Issued, subject: x509.Name, *, server: bool) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1)).not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    return _write(directory, stem, key, builder.sign(ca.key, hashes.SHA256()))


def make_pki(directory: Path) -> Pki:
    ca = make_ca(directory, "ca", "kgw test CA")
    other = make_ca(directory, "other-ca", "someone else's CA")
    alice = _name(CN="alice", OU="apps", O="Example", C="US")
    return Pki(
        ca=ca,
        other_ca=other,
        server=issue(directory, "server", ca, _name(CN="localhost", O="kgw tests"), server=True),
        client=issue(directory, "client", ca, alice, server=False),
        rogue_client=issue(directory, "rogue-client", other, alice, server=False),
    )
