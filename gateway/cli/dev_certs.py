"""``kgw dev-certs``: a throw-away PKI for trying TLS listeners (``make certs``).

Writes, into one directory, the files ``configs/examples/tls-and-sasl.yaml`` names:

=====================  =====================================================================
``ca.pem``             a CA (EC P-256), valid ``days`` days; ``ca-key.pem`` its key
``clients-ca.pem``     the same CA certificate: what an mTLS listener's ``tls.ca_file`` trusts
``gateway.pem``        the gateway's server certificate (SANs: the ``hosts`` given);
                       ``gateway-key.pem`` its key
``client.pem``         a client certificate, subject ``CN=<client_cn>,OU=apps,O=Example``
                       (the example's mapping rule makes it ``User:<client_cn>``);
                       ``client-key.pem`` its key
=====================  =====================================================================

Keys are unencrypted PKCS#8 PEM, mode 0600.  For development and tests only: a production
gateway uses certificates from the organisation's CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["FILES", "Issued", "issue", "make_ca", "name", "write_dev_certs"]

#: every file write_dev_certs writes
FILES = ("ca.pem", "ca-key.pem", "clients-ca.pem", "gateway.pem", "gateway-key.pem", "client.pem", "client-key.pem")


@dataclass(frozen=True)
class Issued:
    """A key and its certificate, in memory and as PEM files."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_file: Path
    key_file: Path


def name(**attrs: str) -> x509.Name:
    """A distinguished name from CN, OU, O, C; RFC 2253 text reads CN=…,OU=…,O=…,C=…"""
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME}
    order = ["C", "O", "OU", "CN"]  # written most-significant first
    return x509.Name([x509.NameAttribute(oids[k], attrs[k]) for k in order if k in attrs])


def _write(directory: Path, stem: str, key, cert: x509.Certificate) -> Issued:
    cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(key_file, 0o600)
    return Issued(key, cert, cert_file, key_file)


def _validity(builder: x509.CertificateBuilder, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return builder.not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=days))


def make_ca(directory: Path, stem: str, common_name: str, *, days: int = 30) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = name(CN=common_name, O="kgw development")
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return _write(directory, stem, key, _validity(builder, days).sign(key, hashes.SHA256()))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(directory: Path, stem: str, ca: Issued, subject: x509.Name, *, server: bool,
          hosts: tuple[str, ...] = ("localhost",), days: int = 30) -> Issued:
    """A server (``hosts`` as SANs) or client certificate signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    return _write(directory, stem, key, _validity(builder, days).sign(ca.key, hashes.SHA256()))


def write_dev_certs(directory: Path, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
                    client_cn: str = "alice", days: int = 30) -> dict[str, Path]:
    """Write :data:`FILES` into ``directory`` (created); returns them by name."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory, "ca", "kgw development CA", days=days)
    (directory / "clients-ca.pem").write_bytes(ca.cert_file.read_bytes())
    issue(directory, "gateway", ca, name(CN=hosts[0], O="kgw development"), server=True, hosts=hosts, days=days)
    issue(directory, "client", ca, name(CN=client_cn, OU="apps", O="Example"), server=False, days=days)
    return {f: directory / f for f in FILES}
