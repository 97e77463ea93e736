"""SASL credentials as kgw stores them, and the hashing that makes them.

* :class:`ScramCredential`: a SCRAM user as Kafka stores it (RFC 5802 salt,
  iterations, StoredKey, ServerKey); :func:`scram_keys` is the one place the
  StoredKey/ServerKey pair is derived from a salted password (YAML users,
  ``kgw hash-password`` and AlterUserScramCredentials all use it).
* :class:`PlainCredential`: a SASL/PLAIN user with a salted PBKDF2 hash (or an
  unsalted SHA-256 for old configs), verified in constant time.
* :class:`CredentialStore`: the users indexed for the SASL servers' lookups.
* :class:`VerifiedPasswords`: the PLAIN passwords verified recently, so that a client
  that logs in again with the right password does not pay the stretched hash again.

Fields marked ``metadata={"secret": True}`` are hidden by ``GatewayConfig.to_dict()``.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, dataclass_transform

__all__ = ["CredentialStore", "PlainCredential", "SCRAM_MIN_ITERATIONS", "SaslMechanism", "ScramCredential",
           "VerifiedPasswords", "scram_credential", "scram_keys"]

SCRAM_MIN_ITERATIONS = 4096
"""Kafka clients refuse a SCRAM exchange with fewer iterations (ScramMechanism.minIterations)."""
PBKDF2_HASHES = {"pbkdf2_sha256": "sha256", "pbkdf2_sha512": "sha512"}

_T = TypeVar("_T")


def _secret(**kwargs: Any) -> Any:
    """A field kept out of repr() and shown as "[hidden]" by GatewayConfig.to_dict()."""
    return field(repr=False, metadata={"secret": True}, **kwargs)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field, _secret))
def _model(cls: type[_T]) -> type[_T]:
    """A credential: frozen, slotted, built by keyword."""
    return dataclass(frozen=True, slots=True, kw_only=True)(cls)


class SaslMechanism(enum.StrEnum):
    """SASL mechanisms the gateway speaks."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"  # a listener validates tokens (KIP-255, KIP-768); no stored credential

    @property
    def hash_name(self) -> str | None:
        """hashlib name of a SCRAM mechanism's hash; None for PLAIN."""
        return {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}.get(self.value)


def scram_keys(mechanism: SaslMechanism, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802 for a salted password: H(HMAC(salted, "Client Key"))
    and HMAC(salted, "Server Key"), as Kafka's ScramFormatter computes them."""
    digest = mechanism.hash_name
    if digest is None:
        raise ValueError(f"{mechanism} is not a SCRAM mechanism")
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    return hashlib.new(digest, client_key).digest(), hmac.digest(salted_password, b"Server Key", digest)


@_model
class ScramCredential:
    """A SCRAM user as Kafka stores it (RFC 5802 StoredKey/ServerKey)."""

    name: str
    """User name."""
    mechanism: SaslMechanism
    """SCRAM-SHA-256 or SCRAM-SHA-512; one credential per (name, mechanism)."""
    salt: bytes
    """Salt (YAML: base64)."""
    iterations: int
    """PBKDF2 iterations; at least 4096, the minimum Kafka clients accept."""
    stored_key: bytes = _secret()
    """H(HMAC(SaltedPassword, "Client Key")) (YAML: base64)."""
    server_key: bytes = _secret()
    """HMAC(SaltedPassword, "Server Key") (YAML: base64)."""

    @classmethod
    def from_password(
        cls, name: str, password: str, mechanism: SaslMechanism, *, salt: bytes | None = None,
        iterations: int = SCRAM_MIN_ITERATIONS,
    ) -> ScramCredential:
        """Derive a credential from a clear-text password (for tooling and tests)."""
        salt = os.urandom(24) if salt is None else salt
        digest = mechanism.hash_name
        if digest is None:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism")
        stored_key, server_key = scram_keys(mechanism, hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations))
        return cls(name=name, mechanism=mechanism, salt=salt, iterations=iterations,
                   stored_key=stored_key, server_key=server_key)


@_model
class PlainCredential:
    """A SASL/PLAIN user: exactly one of password_sha256 or password_hash is set."""

    name: str
    """User name."""
    password_sha256: str | None = _secret(default=None)
    """Lower-case hex SHA-256 of the password (unsalted; prefer password_hash)."""
    password_hash: str | None = _secret(default=None)
    """"pbkdf2_sha256$<iterations>$<salt base64>$<hash base64>" (pbkdf2_sha512 also accepted)."""

    @staticmethod
    def hash_password(password: str, *, iterations: int = 100_000, salt: bytes | None = None) -> str:
        """A password_hash value for `password` (for tooling and tests)."""
        salt = os.urandom(16) if salt is None else salt
        digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        return (f"pbkdf2_sha256${iterations}${base64.b64encode(salt).decode()}"
                f"${base64.b64encode(digest).decode()}")

    def verify(self, password: str) -> bool:
        """True if `password` matches, compared in constant time."""
        if self.password_hash is not None:
            algorithm, iterations, salt, expected = self.password_hash.split("$")
            digest = hashlib.pbkdf2_hmac(
                PBKDF2_HASHES[algorithm], password.encode(), base64.b64decode(salt), int(iterations)
            )
            return hmac.compare_digest(digest, base64.b64decode(expected))
        return hmac.compare_digest(hashlib.sha256(password.encode()).hexdigest(), self.password_sha256 or "")


class VerifiedPasswords:
    """PLAIN passwords verified recently against their stretched hash.

    The stretched hash stays the only thing at rest; what is remembered, in memory only, is an
    HMAC under a key drawn when the process starts, over the stored hash and the password that
    matched it, so a remembered entry proves nothing outside this process and a changed or
    removed user (a new stored hash) never matches an old entry.  Only successes are kept: a
    wrong password always pays the full hash.  Bounded; the least recently used entry goes
    first.  Thread-safe (logins are verified on worker threads).
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._key = os.urandom(32)
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def _digest(self, credential: PlainCredential, password: str) -> bytes:
        stored = (credential.password_hash or credential.password_sha256 or "").encode()
        return hmac.digest(self._key, credential.name.encode() + b"\0" + stored + b"\0" + password.encode(), "sha256")

    def known(self, credential: PlainCredential, password: str) -> bool:
        """True if ``password`` was verified for this very credential recently."""
        digest = self._digest(credential, password)
        with self._lock:
            if digest in self._seen:
                self._seen.move_to_end(digest)
                return True
        return False

    def verify(self, credential: PlainCredential, password: str) -> bool:
        """``credential.verify(password)``, remembered when it succeeds."""
        if self.known(credential, password):
            return True
        if not credential.verify(password):
            return False
        digest = self._digest(credential, password)
        with self._lock:
            self._seen[digest] = None
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._seen)


def scram_credential(name: str, password: str, mechanism: str | SaslMechanism, **kwargs: Any) -> ScramCredential:
    """A ScramCredential for ``password`` (tests, tools); see ``ScramCredential.from_password``."""
    return ScramCredential.from_password(name, password, SaslMechanism(mechanism), **kwargs)


class CredentialStore:
    """The users of a ``UsersConfig`` indexed for lookup: PLAIN by name, SCRAM by (name, mechanism).

    Build it once per configuration (:meth:`of` caches the last few) and share
    it between connections.
    """

    __slots__ = ("plain", "scram")
    _cache: dict[int, tuple[Any, CredentialStore]] = {}

    def __init__(self, users: Any) -> None:
        self.plain: Mapping[str, PlainCredential] = {u.name: u for u in getattr(users, "plain", ()) or ()}
        self.scram: Mapping[tuple[str, str], ScramCredential] = {
            (u.name, str(u.mechanism)): u for u in getattr(users, "scram", ()) or ()
        }

    @classmethod
    def of(cls, users: Any) -> CredentialStore:
        """``users`` itself if it is a store, else the (cached) store of a ``UsersConfig``."""
        if isinstance(users, CredentialStore):
            return users
        hit = cls._cache.get(id(users))
        if hit is not None and hit[0] is users:
            return hit[1]
        store = cls(users)
        if len(cls._cache) >= 8:
            cls._cache.clear()
        cls._cache[id(users)] = (users, store)
        return store
