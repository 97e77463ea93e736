"""TLS for listeners (server side) and for kgw's own upstream connections (client side).

Theory of operation
-------------------
:func:`server_ssl_context` turns a listener's ``tls`` section into an
``ssl.SSLContext`` when the listener starts, and again when its files change or
on SIGHUP (``gateway/auth/tls_reload.py``); every connection accepted meanwhile
shares it.  The policy is fixed:

* TLS 1.2 and 1.3 only (Kafka's default ``ssl.enabled.protocols``); a client
  offering only TLS 1.1 or older fails the handshake;
* OpenSSL's default cipher list and security level, TLS compression off;
  TLS 1.3 session tickets only when no client certificate is requested (see
  the comment in :func:`server_ssl_context`);
* ``client_auth`` maps to ``verify_mode``: ``none`` → ``CERT_NONE`` (no
  certificate is requested), ``requested`` → ``CERT_OPTIONAL`` (requested;
  if sent it must verify against ``ca_file``), ``required`` →
  ``CERT_REQUIRED``.  Kafka's ``ssl.client.auth`` values mean the same.

Configuration problems (a missing file, a key that does not match the
certificate, ``client_auth`` without ``ca_file``) raise :class:`TlsConfigError`
naming the file and the listener setting, because OpenSSL's own messages
(``[SSL] PEM lib (_ssl.c:3917)``) do not.

:func:`tls_handshake` wraps an accepted stream in ``trio.SSLStream`` and runs
the handshake under a deadline.  Every failure becomes
:class:`~gateway.auth.failures.AuthenticationFailed` with a message an operator
can act on.  To tell "a PLAINTEXT client dialled a TLS port" from other
failures, the transport is wrapped in :class:`_FirstBytes`, which keeps the
first bytes the client sent: a TLS client starts with a handshake record
(``0x16``), a Kafka PLAINTEXT client with a 4-byte frame length (``0x00``).
After the first read the wrapper rebinds ``receive_some`` to the inner
stream's method, so it costs nothing on the data path.

The handshake returns the peer certificate as DER (``None`` without one);
:func:`peer_certificate` parses it for the principal builder.
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Any, Callable

import trio
from cryptography import x509

from gateway.auth.failures import AuthenticationFailed

__all__ = [
    "TlsConfigError",
    "certificate_expiry",
    "client_ssl_context",
    "peer_certificate",
    "release_tls_stream",
    "server_ssl_context",
    "tls_files_fingerprint",
    "tls_handshake",
]

DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
"""A reasonable default for ``tls_handshake``: long enough for a slow client on a
lossy link, short enough that idle sockets do not pile up."""

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS_RECORD_HANDSHAKE = 0x16


class TlsConfigError(ValueError):
    """A TLS section cannot be turned into an SSLContext; the message names the file."""


# --------------------------------------------------------------------------- contexts


class SniRoutes:
    """SNI routing of a listener (``SniConfig``): the name a client asks for in its TLS
    ClientHello says whether it wants the bootstrap address or broker N.  ``known(N)`` says
    whether N is a broker the gateway knows; any other name (or none) is refused in the
    handshake with TLS's unrecognized_name alert."""

    def __init__(self, sni_config: Any, known: Callable[[int], bool]) -> None:
        self.bootstrap = sni_config.bootstrap_host.lower()
        before, _, after = sni_config.broker_host_pattern.lower().partition("{node_id}")
        self._broker = re.compile(re.escape(before) + r"(0|[1-9][0-9]{0,8})" + re.escape(after))
        self._known = known

    def route(self, server_name: str | None) -> tuple[bool, int | None]:
        """(True, None): the bootstrap; (True, N): broker N; (False, None): refused."""
        if not server_name:
            return False, None
        name = server_name.lower().rstrip(".")
        if name == self.bootstrap:
            return True, None
        found = self._broker.fullmatch(name)
        if found is None or not self._known(int(found.group(1))):
            return False, None
        return True, int(found.group(1))

    def callback(self, ssl_object: Any, server_name: str | None, _context: ssl.SSLContext) -> int | None:
        ok, node_id = self.route(server_name)
        if not ok:
            ssl_object.kgw_refused_name = server_name or "(none)"  # for the failure's reason
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        ssl_object.kgw_node_id = node_id  # read back by sni_node_id() after the handshake
        return None


def sni_node_id(stream: Any) -> int | None:
    """The node a handshake's SNI name routed to (None: the bootstrap)."""
    ssl_object = getattr(stream, "_ssl_object", None)  # trio.SSLStream's ssl.SSLObject
    return getattr(ssl_object, "kgw_node_id", None)


def server_ssl_context(tls_config, sni: SniRoutes | None = None) -> ssl.SSLContext:
    """The server-side context of a listener (``ListenerTlsConfig``); with ``sni``, the client's
    server name is routed (and an unknown one refused) during the handshake.

    :raises TlsConfigError: a file is missing or unreadable, the key does not
        match the certificate, or client_auth is not ``none`` without a ca_file.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    _load_chain(ctx, tls_config.cert_file, tls_config.key_file, "tls")
    client_auth = str(getattr(tls_config.client_auth, "value", tls_config.client_auth)).lower()
    if client_auth not in _VERIFY_MODES:
        raise TlsConfigError(f"tls.client_auth: expected none, requested or required, got {client_auth!r}")
    if client_auth != "none":
        if tls_config.ca_file is None:
            raise TlsConfigError(f"tls.ca_file is required when client_auth is {client_auth}")
        _load_ca(ctx, tls_config.ca_file, "tls.ca_file")
    ctx.verify_mode = _VERIFY_MODES[client_auth]
    if client_auth != "none":
        # TLS 1.3 session tickets would carry the client certificate: issuing
        # them costs ~0.4 ms per handshake (a third of an mTLS handshake), and
        # Kafka clients keep connections for hours, so resumption rarely pays.
        ctx.num_tickets = 0
    if sni is not None:
        ctx.sni_callback = sni.callback
    return ctx


def client_ssl_context(upstream_tls_config=None) -> ssl.SSLContext:
    """The context for kgw's connections to upstream brokers (``UpstreamTlsConfig`` or None).

    None (or no ca_file) trusts the system store; hostname checking follows
    ``check_hostname`` (on by default).  A cert_file/key_file pair enables mTLS.

    :raises TlsConfigError: as for :func:`server_ssl_context`.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    cfg = upstream_tls_config
    if cfg is not None and cfg.ca_file is not None:
        _load_ca(ctx, cfg.ca_file, "upstream.tls.ca_file")
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cfg is not None and cfg.cert_file is not None:
        _load_chain(ctx, cfg.cert_file, cfg.key_file, "upstream.tls")
    ctx.check_hostname = True if cfg is None else bool(cfg.check_hostname)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert_file: Path, key_file: Path | None, where: str) -> None:
    for key, path in (("cert_file", cert_file), ("key_file", key_file)):
        if path is not None and not Path(path).is_file():
            raise TlsConfigError(f"{where}.{key}: no such file: {path}")
    try:
        ctx.load_cert_chain(str(cert_file), None if key_file is None else str(key_file))
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"{where}: cannot load certificate {cert_file} with key {key_file}: {_ssl_reason(exc)} "
            "(is it PEM, unencrypted, and does the key match the certificate?)"
        ) from None
    except OSError as exc:
        raise TlsConfigError(f"{where}: cannot read {cert_file} / {key_file}: {exc.strerror or exc}") from None


def _load_ca(ctx: ssl.SSLContext, ca_file: Path, where: str) -> None:
    if not Path(ca_file).is_file():
        raise TlsConfigError(f"{where}: no such file: {ca_file}")
    try:
        ctx.load_verify_locations(cafile=str(ca_file))
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"{where}: cannot load CA bundle {ca_file}: {_ssl_reason(exc)}") from None


def tls_files_fingerprint(tls_config) -> tuple:
    """What identifies the current contents of a listener's certificate, key and CA files:
    inode, size and modification time of each (None for a missing file).  A rewrite, a copy
    over the file and Kubernetes' symlink swap of a mounted secret all change it."""
    out = []
    for path in (tls_config.cert_file, tls_config.key_file, tls_config.ca_file):
        if path is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def certificate_expiry(cert_file: Path) -> float | None:
    """The earliest notAfter (Unix time) of the certificates in a PEM file, or None if it
    cannot be read."""
    try:
        certs = x509.load_pem_x509_certificates(Path(cert_file).read_bytes())
    except (OSError, ValueError):
        return None
    return min(c.not_valid_after_utc.timestamp() for c in certs) if certs else None


# --------------------------------------------------------------------------- handshake


class _FirstBytes(trio.abc.Stream):
    """A pass-through stream that remembers the first chunk the peer sent."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.first: bytes = b""
        self.send_all = inner.send_all  # type: ignore[method-assign]
        self.wait_send_all_might_not_block = inner.wait_send_all_might_not_block  # type: ignore[method-assign]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.inner.receive_some(max_bytes)
        self.first = bytes(data[:8])
        self.receive_some = self.inner.receive_some  # type: ignore[method-assign]  # data path: no wrapper
        return data

    async def send_all(self, data) -> None:  # replaced per instance in __init__
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:  # replaced per instance in __init__
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def tls_handshake(
    stream: trio.abc.Stream, context: ssl.SSLContext, timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
) -> tuple[trio.SSLStream, bytes | None]:
    """Run the server side of a TLS handshake on an accepted ``stream``.

    Returns the ``trio.SSLStream`` to use from now on and the client
    certificate (DER), or None when the client presented none.

    Resource handling: on failure ``stream`` is *not* closed; the caller owns
    it and closes it (it would be ``aclose_forcefully`` in the connection's
    ``finally`` anyway).

    :raises AuthenticationFailed: with a message naming the cause: timeout,
        plaintext client, unsupported protocol version, missing or untrusted
        client certificate, or the client closing the connection.
    """
    recorder = _FirstBytes(stream)
    ssl_stream = trio.SSLStream(recorder, context, server_side=True, https_compatible=False)
    with trio.move_on_after(timeout_s) as scope:
        try:
            await ssl_stream.do_handshake()
        except trio.BrokenResourceError as exc:
            refused = getattr(getattr(ssl_stream, "_ssl_object", None), "kgw_refused_name", None)
            release_tls_stream(ssl_stream)
            if refused is not None:
                raise AuthenticationFailed(f"TLS server name {refused} is not served on this listener (SNI: "
                                           "neither its bootstrap name nor a known broker's)") from exc
            raise AuthenticationFailed(_describe_failure(exc, recorder.first)) from exc
    if scope.cancelled_caught:
        release_tls_stream(ssl_stream)
        raise AuthenticationFailed(f"TLS handshake timed out after {timeout_s:g}s")
    return ssl_stream, ssl_stream.getpeercert(binary_form=True)


async def _released(*args) -> None:
    raise trio.ClosedResourceError("this TLS stream's connection is over")


def release_tls_stream(stream: object) -> None:
    """Break ``trio.SSLStream``'s reference cycle once its connection is over (no-op for
    another stream).  The stream keeps its handshake as ``_Once(self._do_handshake)``, a bound
    method of itself, so without this it (its SSL object, BIO buffers, socket wrapper) waits
    for a full collection of the cycle collector, which kgw makes rare (``gc.freeze()``, high
    thresholds): RSS grew ~0.8 MB per 1,000 TLS connections (``bench/churn.py --tls``).  Any
    later use of the stream raises ClosedResourceError."""
    once = getattr(stream, "_handshook", None)
    if once is not None and hasattr(once, "_afn"):
        once._afn = _released


def peer_certificate(der: bytes | None) -> x509.Certificate | None:
    """Parse the DER certificate returned by :func:`tls_handshake` (None stays None)."""
    return None if der is None else x509.load_der_x509_certificate(der)


def _describe_failure(exc: trio.BrokenResourceError, first: bytes) -> str:
    """An operator-facing reason for a failed handshake."""
    if first and first[0] != _TLS_RECORD_HANDSHAKE:
        hint = "a Kafka PLAINTEXT client" if first[0] == 0 else "not a TLS client"
        return (
            f"client sent non-TLS bytes on a TLS listener (first bytes {first[:4].hex(' ')}; "
            f"looks like {hint}: check its security.protocol)"
        )
    cause = exc.__cause__
    # (an EOF mid-handshake is an SSLEOFError, an UNEXPECTED_EOF reason or, with some OpenSSL
    # builds, such as Debian's Python's, SSL_ERROR_ZERO_RETURN: SSLZeroReturnError)
    if not isinstance(cause, ssl.SSLError) or isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError)) or (
        "UNEXPECTED_EOF" in _ssl_reason(cause)
    ):
        return "client closed the connection during the TLS handshake" + (
            "" if first else " before sending anything"
        )
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"client certificate refused: {cause.verify_message} (is it issued by the listener's ca_file?)"
    reason = _ssl_reason(cause)
    known = {
        "UNSUPPORTED_PROTOCOL": "client offered only TLS versions older than 1.2",
        "VERSION_TOO_LOW": "client offered only TLS versions older than 1.2",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE": "client did not present a certificate (client_auth is required)",
        "NO_SHARED_CIPHER": "no cipher suite in common with the client",
        "TLSV1_ALERT_UNKNOWN_CA": "client does not trust the listener's certificate (unknown CA)",
        "SSLV3_ALERT_BAD_CERTIFICATE": "client rejected the listener's certificate",
        "WRONG_VERSION_NUMBER": "client sent a malformed TLS record",
    }
    for key, text in known.items():
        if key in reason:
            return f"TLS handshake failed: {text} ({reason})"
    return f"TLS handshake failed: {reason}"


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason)
    return str(getattr(exc, "strerror", None) or exc)
