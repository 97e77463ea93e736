"""The SCRAM-SHA-256/512 server (RFC 5802, RFC 7677, Kafka's ``ScramSaslServer``): the
exchange of client-first, server-first, client-final and server-final messages, with
constant-time proof checks, the ``tokenauth`` extension refused, and plausible stable salts
for unknown users (RFC 5802 §9).  :mod:`gateway.auth.sasl` frames it in Kafka's SASL APIs.
"""

from __future__ import annotations
import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from authz.credentials import SCRAM_MIN_ITERATIONS, SaslMechanism, ScramCredential


class SaslFailure(Exception):
    """A SASL exchange failed.

    ``client_message`` goes to the client in the error response;
    ``reason`` (default: the same) is for the gateway's log.  Neither
    contains a secret.
    """

    def __init__(self, client_message: str, reason: str | None = None, *, cause: str = "other") -> None:
        super().__init__(client_message)
        self.client_message = client_message
        self.reason = reason or client_message
        #: a fixed word for metrics: "credentials", "scram_nonce_repeated" or "other"
        self.cause = cause

_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


_EXTENSION = re.compile(r"([A-Za-z]+)=([^,]*)")


_SCRAM_GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


_FAKE_SALT_KEY = secrets.token_bytes(32)


def _default_nonce() -> str:
    return secrets.token_urlsafe(24)  # 192 bits; alphabet has no ','


class ScramServer:
    """SCRAM-SHA-256 / SCRAM-SHA-512 server (RFC 5802, RFC 7677) over stored credentials.

    Args:
        mechanism: "SCRAM-SHA-256" or "SCRAM-SHA-512".
        credentials: (name, mechanism) -> ScramCredential.
        nonce_factory: the server's nonce part (tests pass RFC 7677's).
    """

    def __init__(
        self, mechanism: str, credentials: Mapping[tuple[str, str], ScramCredential],
        *, nonce_factory: Callable[[], str] = _default_nonce,
    ) -> None:
        self.mechanism = str(mechanism)
        self._hash = SaslMechanism(self.mechanism).hash_name
        if self._hash is None:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism")
        self._credentials = credentials
        self._nonce_factory = nonce_factory
        self._step = self._client_first
        self.complete = False
        self.authorization_id: str | None = None
        # exchange state
        self._username = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._client_nonce = ""
        #: the user name the client gave (audit of failures)
        self.attempted_user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("message is not UTF-8") from None
        step, self._step = self._step, self._done
        return step(text)

    # -- steps ------------------------------------------------------------------

    def _client_first(self, text: str) -> bytes:
        gs2_header, authzid, bare = self._parse_gs2(text)
        username, client_nonce, extensions = self._parse_client_first_bare(bare)
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslFailure(
                "Authentication failed: delegation token authentication (tokenauth) is not supported by kgw",
                f"user {username!r} tried delegation-token authentication",
            )
        if authzid and authzid != username:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different from username",
                f"user {username!r} asked for authorization id {authzid!r}",
            )
        self._username = self.attempted_user = username
        credential = self._credentials.get((username, self.mechanism))
        self._known = credential is not None
        self._credential = credential if credential is not None else self._fake_credential(username)
        if self._credential.iterations < SCRAM_MIN_ITERATIONS:
            raise self._fail(f"user {username!r} has fewer than {SCRAM_MIN_ITERATIONS} iterations")
        salt, iterations = self._credential.salt, self._credential.iterations
        self._gs2_header, self._client_first_bare = gs2_header, bare
        self._client_nonce = client_nonce
        self._nonce = client_nonce + self._server_nonce()
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._step = self._client_final
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, proof = self._parse_client_final(text)
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        # Same work for unknown users (fake credential) as for known ones.
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        proof_ok = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key)
        if not (proof_ok and self._known):
            why = "invalid proof for" if self._known else "unknown"
            raise self._fail(f"{why} user {self._username!r}", cause="credentials")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self.authorization_id = self._username
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)

    def _done(self, text: str) -> bytes:
        raise self._fail("unexpected message after the exchange")

    # -- parsing ------------------------------------------------------------------

    def _parse_gs2(self, text: str) -> tuple[str, str, str]:
        """Split client-first into (gs2 header, authzid, client-first-message-bare)."""
        flag, sep, rest = text.partition(",")
        if not sep or flag not in ("n", "y"):
            if flag.startswith("p="):
                raise self._fail("client requires channel binding, which kgw does not offer")
            raise self._fail("invalid gs2 header")
        authz, sep, bare = rest.partition(",")
        if not sep or (authz and not authz.startswith("a=")):
            raise self._fail("invalid gs2 header")
        authzid = _sasl_name(authz[2:]) if authz else ""
        if authz and authzid is None:
            raise self._fail("invalid authorization id")
        return f"{flag},{authz},", authzid or "", bare

    def _parse_client_first_bare(self, bare: str) -> tuple[str, str, dict[str, str]]:
        attrs = bare.split(",")
        if attrs[0].startswith("m="):
            raise self._fail("mandatory extension (m=) not supported")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise self._fail("invalid client-first message")
        username = _sasl_name(attrs[0][2:])
        nonce = attrs[1][2:]
        if not username:
            raise self._fail("invalid user name")
        if not _PRINTABLE_NONCE.fullmatch(nonce):
            raise self._fail("invalid client nonce")
        extensions = {}
        for item in attrs[2:]:
            m = _EXTENSION.fullmatch(item)
            if m is None:
                raise self._fail("invalid extension in client-first message")
            extensions[m.group(1)] = m.group(2)
        return username, nonce, extensions

    def _parse_client_final(self, text: str) -> tuple[str, bytes]:
        """(client-final-message-without-proof, proof), after checking c= and r=."""
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = without_proof.split(",")
        if not sep or len(attrs) < 2 or not attrs[0].startswith("c=") or not attrs[1].startswith("r="):
            raise self._fail("invalid client-final message")
        expected_cb = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs[0][2:] != expected_cb:
            raise self._fail("channel binding does not match the gs2 header")
        nonce = attrs[1][2:].encode()
        if not hmac.compare_digest(nonce, self._nonce.encode()):
            if hmac.compare_digest(nonce, (self._client_nonce + self._nonce).encode()):
                # librdkafka before 2.6.1 (confluentinc/librdkafka#4895).  Kafka 3.8.1-3.9 accepted a
                # nonce that ends with the right one; Kafka 4.x requires it to be equal (RFC 5802), and
                # so does kgw, which stands in for Kafka 4.x brokers.
                raise self._fail(
                    "the client-final message repeats the client nonce before the server's: a bug of "
                    "librdkafka before 2.6.1 (confluentinc/librdkafka#4895) that Kafka 4.x brokers refuse too; "
                    "upgrade the client's librdkafka to 2.6.1 or later", cause="scram_nonce_repeated")
            raise self._fail("nonce does not match the server-first message")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("invalid proof encoding") from None
        if len(proof) != hashlib.new(self._hash).digest_size:
            raise self._fail("invalid proof length")
        return without_proof, proof

    # -- helpers ------------------------------------------------------------------

    def _fake_credential(self, username: str) -> ScramCredential:
        """RFC 5802 §9: an unknown user gets a plausible, stable salt and keys nothing matches."""
        size = hashlib.new(self._hash).digest_size
        salt = hmac.digest(_FAKE_SALT_KEY, f"{self.mechanism}\x00{username}".encode(), "sha256")[:24]
        return ScramCredential(
            name=username, mechanism=SaslMechanism(self.mechanism), salt=salt, iterations=SCRAM_MIN_ITERATIONS,
            stored_key=secrets.token_bytes(size), server_key=secrets.token_bytes(size),
        )

    def _server_nonce(self) -> str:
        nonce = self._nonce_factory()
        if not _PRINTABLE_NONCE.fullmatch(nonce):
            raise ValueError("server nonce must be printable ASCII without ','")
        return nonce

    def _fail(self, reason: str, *, cause: str = "other") -> SaslFailure:
        self._credential = None
        return SaslFailure(_SCRAM_GENERIC.format(self.mechanism), reason, cause=cause)


def _sasl_name(text: str) -> str | None:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is invalid (None)."""
    if text.replace("=2C", "").replace("=3D", "").find("=") >= 0:
        return None
    return text.replace("=2C", ",").replace("=3D", "=")
