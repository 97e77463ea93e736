"""Test PKI generated at run time by the product's own generator (``gateway/cli/dev_certs.py``,
``kgw dev-certs``): CAs, server and client certificates.

``make_pki(tmp_dir)`` writes PEM files and returns their paths.  Keys are EC P-256 (fast to
generate and to handshake with); nothing is cached on disk between test sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.cli.dev_certs import Issued, issue, make_ca, name

__all__ = ["Issued", "Pki", "make_ca", "issue", "make_pki"]


@dataclass(frozen=True)
class Pki:
    ca: Issued
    other_ca: Issued
    server: Issued
    client: Issued
    """Client certificate issued by ``ca``: CN=alice,OU=apps,O=Example,C=US."""
    rogue_client: Issued
    """Client certificate with the same subject, issued by ``other_ca``."""


def make_pki(directory: Path) -> Pki:
    ca = make_ca(directory, "ca", "kgw test CA")
    other = make_ca(directory, "other-ca", "someone else's CA")
    alice = name(CN="alice", OU="apps", O="Example", C="US")
    return Pki(
        ca=ca,
        other_ca=other,
        server=issue(directory, "server", ca, name(CN="localhost", O="kgw tests"), server=True),
        client=issue(directory, "client", ca, alice, server=False),
        rogue_client=issue(directory, "rogue-client", other, alice, server=False),
    )
