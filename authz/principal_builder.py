"""Principal builders: who a client is, from how it authenticated.

Theory of operation
-------------------
When a connection has authenticated (or, for PLAINTEXT and SSL, as soon as it
is accepted) the gateway describes *how* with an :class:`AuthenticationContext`
and asks the listener's :class:`KafkaPrincipalBuilder` for a
:class:`~authz.principal.KafkaPrincipal`.  The variants mirror Kafka's:

* :class:`PlaintextAuthenticationContext` — no authentication at all;
* :class:`SslAuthenticationContext` — TLS, with the client certificate when one
  was presented and verified (``None`` otherwise);
* :class:`SaslAuthenticationContext` — SASL over PLAINTEXT or TLS: the
  mechanism, the authorization id the mechanism established, and, on
  SASL_SSL, the client certificate too (custom builders may use it; the
  default builder ignores it, as Kafka's does).

:class:`DefaultKafkaPrincipalBuilder` reproduces Kafka's
``DefaultKafkaPrincipalBuilder`` (Kafka's ``DefaultKafkaPrincipalBuilder``):

=====================================  =========================================
PLAINTEXT                              ``User:ANONYMOUS``
SSL, client certificate                ``User:`` + mapping rules applied to the
                                       subject DN in Java's RFC 2253 form
SSL, no client certificate             ``User:ANONYMOUS``
SASL (PLAIN, SCRAM)                    ``User:`` + the authorization id
=====================================  =========================================

When no mapping rule applies to a DN, :class:`PrincipalBuildError` is raised
and the connection must be closed (Kafka does the same).

The subject DN
--------------
Kafka maps ``X500Principal.getName()``, Java's RFC 2253 rendering, and users
write their rules against that exact text.  :func:`rfc2253_name` reproduces it
from the certificate's DER rather than using ``cryptography``'s RFC 4514
string, which differs in ways that break rules:

* RDNs are written last-first, joined by ``,`` with no spaces; the values of a
  multi-valued RDN are joined by ``+`` in their encoded order;
* only CN, C, L, ST, O, OU, STREET, DC and UID get keywords; every other
  attribute (emailAddress, serialNumber, title …) is written as its dotted OID
  and ``#`` + the hex of its DER encoding
  (``1.2.840.113549.1.9.1=#16116164…``);
* the characters ``, = + < > # ; " \\`` are escaped with a backslash wherever
  they occur (RFC 4514 escapes ``#`` only in first position), and leading and
  trailing spaces are escaped;
* string types Java does not decode (UniversalString, VisibleString,
  NumericString …) are written in the ``#hex`` form too.

Custom builders (KIP-111)
-------------------------
``listener.principal_builder: "pkg.mod:Class"`` names any class with a
``build(context) -> KafkaPrincipal`` method.  :func:`load_principal_builder`
imports it and instantiates it (see there for how configs are passed).  The
principal it returns, including a ``KafkaPrincipal`` *subclass* carrying extra
fields, is handed to the connection and the authorizer unchanged: nothing in
this module copies or normalises it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from cryptography import x509

from authz.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from authz.ssl_principal_mapping import NoMatchingRule, SslPrincipalMapper

__all__ = [
    "AuthenticationContext",
    "DefaultKafkaPrincipalBuilder",
    "KafkaPrincipalBuilder",
    "PlaintextAuthenticationContext",
    "PrincipalBuildError",
    "PrincipalBuilderLoadError",
    "SaslAuthenticationContext",
    "SslAuthenticationContext",
    "load_principal_builder",
    "rfc2253_name",
]


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthenticationContext:
    """What every context carries: where the client came from and on which listener."""

    client_address: str
    """The client's IP address (text, without the port)."""
    listener_name: str
    """The listener's configured name (upper case)."""
    security_protocol: str
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaintextAuthenticationContext(AuthenticationContext):
    """A PLAINTEXT connection: nothing was authenticated."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SslAuthenticationContext(AuthenticationContext):
    """A TLS connection, after the handshake."""

    peer_certificate: x509.Certificate | None = None
    """The verified client certificate; None when the client sent none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticationContext(AuthenticationContext):
    """A connection that completed a SASL exchange."""

    mechanism: str
    """PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."""
    authorization_id: str
    """The identity the mechanism established (the user name for PLAIN and SCRAM)."""
    ssl_peer_certificate: x509.Certificate | None = None
    """On SASL_SSL, the client certificate if one was presented (the default builder ignores it)."""
    token: Any = None
    """With OAUTHBEARER, the validated token (``gateway.auth.oauthbearer.ValidatedToken``: its
    ``claims``, ``scopes``, ``groups`` and ``expires_at``), for a custom builder."""

    @classmethod
    def from_base(
        cls, base: AuthenticationContext, *, mechanism: str, authorization_id: str, token: Any = None
    ) -> SaslAuthenticationContext:
        """The SASL context of a connection whose accept-time context is ``base``."""
        return cls(
            client_address=base.client_address,
            listener_name=base.listener_name,
            security_protocol=base.security_protocol,
            mechanism=mechanism,
            authorization_id=authorization_id,
            ssl_peer_certificate=getattr(base, "peer_certificate", None),
            token=token,
        )


# --------------------------------------------------------------------------- builders


class PrincipalBuildError(Exception):
    """No principal can be built for this connection; it must be closed."""


class PrincipalBuilderLoadError(ImportError):
    """The configured principal builder could not be loaded; the message names its path."""


@runtime_checkable
class KafkaPrincipalBuilder(Protocol):
    """Builds the principal of an authenticated connection (Kafka ``KafkaPrincipalBuilder``).

    ``build`` is called once per connection when authentication completes
    (on accept for PLAINTEXT and SSL listeners).  It may return a subclass of
    ``KafkaPrincipal``; the gateway keeps that exact object.  Raising any
    exception closes the connection.
    """

    def build(self, context: AuthenticationContext) -> KafkaPrincipal: ...


class DefaultKafkaPrincipalBuilder:
    """Kafka's default principal builder; see the module docstring for the table.

    Args:
        ssl_mapping_rules: the listener's ``ssl.principal.mapping.rules``
            text (None = ``DEFAULT``).  Parsed here, once.

    :raises ValueError: the rules are invalid (the message names the rule).
    """

    __slots__ = ("mapper",)

    def __init__(self, ssl_mapping_rules: str | None = "DEFAULT") -> None:
        self.mapper = SslPrincipalMapper(ssl_mapping_rules)

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> DefaultKafkaPrincipalBuilder:
        """Build from the configs ``load_principal_builder`` passes (key ``ssl.principal.mapping.rules``)."""
        return cls(configs.get("ssl.principal.mapping.rules", "DEFAULT"))

    def build(self, context: AuthenticationContext) -> KafkaPrincipal:
        if isinstance(context, SaslAuthenticationContext):
            return KafkaPrincipal(USER_TYPE, context.authorization_id)
        if isinstance(context, SslAuthenticationContext):
            if context.peer_certificate is None:
                return ANONYMOUS
            return KafkaPrincipal(USER_TYPE, self.map_dn(rfc2253_name(context.peer_certificate.subject)))
        if isinstance(context, PlaintextAuthenticationContext):
            return ANONYMOUS
        raise PrincipalBuildError(f"unhandled authentication context type {type(context).__name__}")

    def map_dn(self, dn: str) -> str:
        """The principal name for a subject DN.

        :raises PrincipalBuildError: no mapping rule applies.
        """
        try:
            return self.mapper.get_name(dn)
        except NoMatchingRule as exc:
            raise PrincipalBuildError(
                f"Failed to map name for '{dn}' based on SSL principal mapping rules: {exc}"
            ) from None


def load_principal_builder(import_path: str | None, configs: Mapping[str, Any] | None = None) -> KafkaPrincipalBuilder:
    """The listener's principal builder, ready to use.

    ``import_path`` None gives :class:`DefaultKafkaPrincipalBuilder` built from
    ``configs`` (key ``ssl.principal.mapping.rules``).  Otherwise
    ``"package.module:Class"`` (or ``package.module.Class``) is imported and:

    * if the class has a ``from_configs`` classmethod, ``Class.from_configs(configs)``;
    * otherwise ``Class()``, then ``instance.configure(configs)`` if it has a
      ``configure`` method (Kafka's ``Configurable``).

    ``configs`` is a plain dict copy; the gateway passes at least
    ``listener.name``, ``security.protocol`` and ``ssl.principal.mapping.rules``.

    :raises PrincipalBuilderLoadError: the path is malformed, the import fails,
        the attribute is missing, instantiation fails, or the object has no
        callable ``build``.  The message always names ``import_path``.
    """
    configs = dict(configs or {})
    if import_path is None:
        return DefaultKafkaPrincipalBuilder.from_configs(configs)
    cls = _resolve(import_path)
    try:
        if callable(getattr(cls, "from_configs", None)):
            builder = cls.from_configs(configs)
        else:
            builder = cls()
            if callable(getattr(builder, "configure", None)):
                builder.configure(configs)
    except Exception as exc:
        raise PrincipalBuilderLoadError(
            f"cannot load principal builder {import_path!r}: creating it failed: {exc!r}"
        ) from exc
    if not callable(getattr(builder, "build", None)):
        raise PrincipalBuilderLoadError(
            f"cannot load principal builder {import_path!r}: {cls!r} has no build(context) method"
        )
    return cast(KafkaPrincipalBuilder, builder)


def _resolve(import_path: str) -> Any:
    path = import_path.strip() if isinstance(import_path, str) else ""
    module_name, sep, attr_path = path.partition(":")
    if not sep:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise PrincipalBuilderLoadError(
            f"principal builder path {import_path!r} must look like 'package.module:Class'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PrincipalBuilderLoadError(
            f"cannot load principal builder {import_path!r}: importing module {module_name!r} failed: {exc}"
        ) from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise PrincipalBuilderLoadError(
                f"cannot load principal builder {import_path!r}: module {module_name!r} has no attribute {attr_path!r}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise PrincipalBuilderLoadError(f"cannot load principal builder {import_path!r}: {obj!r} is not a class")
    return obj


# --------------------------------------------------------------------------- RFC 2253 (Java)

# Keywords Java's X500Principal.getName() (RFC 2253) uses; everything else is an OID.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string tags Java decodes to text in getName(); other tags are written as #hex.
_STRING_CODECS = {12: "utf-8", 19: "latin-1", 20: "latin-1", 22: "latin-1", 27: "latin-1", 30: "utf-16-be"}
_ESCAPEES = frozenset(',=+<>#;"\\')


def rfc2253_name(name: x509.Name) -> str:
    """``name`` as Java's ``X500Principal.getName()`` writes it (see the module docstring).

    >>> from cryptography.x509.oid import NameOID
    >>> rfc2253_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a,b"),
    ...                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Ex")]))
    'O=Ex,CN=a\\\\,b'
    """
    rdns = _der_name(name.public_bytes())
    return ",".join("+".join(_ava(oid, tag, tlv, content) for oid, tag, tlv, content in rdn) for rdn in reversed(rdns))


def _ava(oid: str, tag: int, tlv: bytes, content: bytes) -> str:
    keyword = _RFC2253_KEYWORDS.get(oid)
    codec = _STRING_CODECS.get(tag)
    if keyword is None or codec is None:
        return f"{keyword or oid}=#{tlv.hex()}"
    return f"{keyword}={_escape(content.decode(codec, errors='replace'))}"


def _escape(value: str) -> str:
    chars = [("\\" + c) if c in _ESCAPEES else c for c in value]
    lead = next((i for i, c in enumerate(chars) if c not in (" ", "\r")), len(chars))
    trail = next((i for i in range(len(chars) - 1, -1, -1) if chars[i] not in (" ", "\r")), -1)
    return "".join(("\\" + c) if (i < lead or i > trail) else c for i, c in enumerate(chars))


# A minimal DER walker for Name ::= SEQUENCE OF SET OF SEQUENCE { OID, ANY }.
# The bytes come from cryptography (already parsed and re-encoded), so they are
# well formed; errors still raise ValueError rather than looping.

def _der_name(der: bytes) -> list[list[tuple[str, int, bytes, bytes]]]:
    tag, body, _ = _tlv(der, 0)
    if tag != 0x30:
        raise ValueError("Name is not a SEQUENCE")
    rdns = []
    for set_tag, set_body in _children(body):
        if set_tag != 0x31:
            raise ValueError("RDN is not a SET")
        avas = []
        for seq_tag, seq_body in _children(set_body):
            oid_tag, oid_body, end = _tlv(seq_body, 0)
            value_tag, value_body, value_end = _tlv(seq_body, end)
            if seq_tag != 0x30 or oid_tag != 0x06:
                raise ValueError("malformed AttributeTypeAndValue")
            avas.append((_oid(oid_body), value_tag, bytes(seq_body[end:value_end]), bytes(value_body)))
        rdns.append(avas)
    return rdns


def _children(body: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset < len(body):
        tag, content, offset = _tlv(body, offset)
        yield tag, content


def _tlv(buf: bytes, offset: int) -> tuple[int, bytes, int]:
    """(tag, content, offset after) of the TLV at ``offset`` (single-byte tags only)."""
    if offset + 2 > len(buf):
        raise ValueError("truncated DER")
    tag, length = buf[offset], buf[offset + 1]
    offset += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or offset + count > len(buf):
            raise ValueError("unsupported DER length")
        length = int.from_bytes(buf[offset:offset + count], "big")
        offset += count
    if offset + length > len(buf):
        raise ValueError("truncated DER")
    return tag, buf[offset:offset + length], offset + length


def _oid(body: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in [first, arcs[0] - 40 * first, *arcs[1:]])
