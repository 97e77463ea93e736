"""KafkaPrincipal: who the client is, as the authorizer sees it.

Theory of operation
-------------------
A principal is a ``(principal_type, name)`` pair, written ``Type:Name``
(``User:alice``).  Parsing text splits at the **first** ``:``, so names may
themselves contain colons (``User:CN=a:b`` is type ``User``, name ``CN=a:b``).

KIP-111: the principal builder may return a *subclass* carrying extra fields
(a certificate, a tenant, group memberships …).  The gateway must hand that
exact object to ``Authorizer.authorize()`` inside the request context; nothing
on the way may rebuild it from its text.  ACL matching, however, only ever
looks at the type and the name: ``StandardAuthorizer`` reduces every principal
to its ``Type:Name`` key (``StandardAuthorizerData``'s rule 1), so a subclass matches the
same ACLs as the plain principal.

Equality and hashing are on ``(principal_type, name)`` only — the
``token_authenticated`` flag and any subclass fields are ignored — so
principals can be used as dict keys for ACL purposes.  (Kafka's ``equals``
also requires the same class; kgw deliberately does not, and the authorizer
never relies on equality anyway: it compares the ``key`` text.)

Principals are immutable.  A subclass may add its own attributes (set them
before or after ``super().__init__``), but must not rebind the base fields.

``User:ANONYMOUS`` is an ordinary principal (PLAINTEXT clients, one-way SSL);
ACLs and ``super.users`` may name it.  ``User:*`` is the only wildcard
principal in ACLs (``Group:*`` matches only a principal literally named ``*``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KafkaPrincipal",
    "parse_principal",
    "USER_TYPE",
    "ANONYMOUS",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_PRINCIPAL_KEY",
]

USER_TYPE = "User"

_BASE_FIELDS = frozenset({"principal_type", "name", "token_authenticated", "key"})


class KafkaPrincipal:
    """An authenticated identity.

    Args:
        principal_type: e.g. ``"User"``.
        name: the principal's name; may contain ``:``.
        token_authenticated: True when authenticated with a delegation token
            (SASL SCRAM with ``tokenauth=true``); such principals are refused
            by the delegation-token APIs.

    Attributes:
        key: the ``Type:Name`` text, computed once; the authorizer matches on it.
    """

    __slots__ = ("principal_type", "name", "token_authenticated", "key", "group_keys", "__weakref__", "__dict__")

    principal_type: str
    name: str
    token_authenticated: bool
    key: str
    #: ``Group:<name>`` principals the identity also holds (from a token's groups claim): the
    #: StandardAuthorizer matches ACLs on them alongside ``key`` (an empty tuple by default)
    group_keys: tuple[str, ...]

    def __init__(self, principal_type: str, name: str, token_authenticated: bool = False) -> None:
        if principal_type is None or name is None:
            raise ValueError("principal_type and name can not be None")
        if not isinstance(principal_type, str) or not isinstance(name, str):
            raise TypeError("principal_type and name must be str")
        set_ = object.__setattr__
        set_(self, "principal_type", principal_type)
        set_(self, "name", name)
        set_(self, "token_authenticated", bool(token_authenticated))
        set_(self, "key", f"{principal_type}:{name}")
        set_(self, "group_keys", ())

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr in _BASE_FIELDS:
            raise AttributeError(f"KafkaPrincipal.{attr} is read-only")
        object.__setattr__(self, attr, value)

    def __delattr__(self, attr: str) -> None:
        if attr in _BASE_FIELDS:
            raise AttributeError(f"KafkaPrincipal.{attr} is read-only")
        object.__delattr__(self, attr)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KafkaPrincipal):
            return NotImplemented
        return self.principal_type == other.principal_type and self.name == other.name

    def __hash__(self) -> int:
        return hash((self.principal_type, self.name))

    def __str__(self) -> str:
        return self.key

    def __repr__(self) -> str:
        extra = ", token_authenticated=True" if self.token_authenticated else ""
        return f"{type(self).__name__}({self.principal_type!r}, {self.name!r}{extra})"

    def base(self) -> "KafkaPrincipal":
        """A plain ``KafkaPrincipal`` with this type and name (no subclass fields)."""
        if type(self) is KafkaPrincipal and not self.token_authenticated:
            return self
        return KafkaPrincipal(self.principal_type, self.name)


def parse_principal(text: str) -> KafkaPrincipal:
    """Parse ``Type:Name``, splitting at the first ``:``.

    Like Kafka's ``SecurityUtils.parseKafkaPrincipal``, an empty type or name
    (``"User:"``) is accepted; only a missing colon or empty text is refused.

    :raises ValueError: if ``text`` is empty or has no ``:``.

    >>> parse_principal("User:CN=a:b").name
    'CN=a:b'
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a string in format principalType:principalName but got {text!r}")
    if not text:
        raise ValueError("expected a string in format principalType:principalName but got an empty string")
    principal_type, sep, name = text.partition(":")
    if not sep:
        raise ValueError(
            f"Could not parse principal from `{text}` (no colon is present separating the "
            "principal type from the principal name)"
        )
    return KafkaPrincipal(principal_type, name)


#: The principal of unauthenticated clients.
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
#: The wildcard principal usable in ACLs.
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")
WILDCARD_PRINCIPAL_KEY = WILDCARD_PRINCIPAL.key
