"""kgw's own OAUTHBEARER token towards the upstream cluster: the OAuth 2 client-credentials grant.

Theory of operation
-------------------
A cluster that accepts only OAuth wants kgw to log in like any Kafka client configured with
KIP-768's ``OAuthBearerLoginCallbackHandler``: POST ``grant_type=client_credentials`` (and the
scope, if one is configured) to the provider's token endpoint, the client id and secret in HTTP
Basic authentication (RFC 6749 section 2.3.1), and present the ``access_token`` it returns in the
SASL/OAUTHBEARER client message (RFC 7628).

One :class:`ClientCredentialsToken` per ``upstream.sasl.oauthbearer`` section serves every
upstream connection of the process (:func:`token_source`).  The token is kept and reused until
``refresh_window_factor`` (Kafka's ``sasl.login.refresh.window.factor``, 0.8) of its lifetime
(``expires_in``) has passed; the next connection or re-authentication then fetches a new one.
The HTTP exchange runs on a worker thread, never on the event loop, and one fetch at a time
(a lock held in that thread: concurrent callers share the result).  Failures raise
:class:`TokenUnavailable` with the provider's ``error``/``error_description`` and never the
secret or the token.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import trio

__all__ = ["ClientCredentialsToken", "TokenUnavailable", "token_endpoint", "token_source"]

log = logging.getLogger("kgw.upstream")


class TokenUnavailable(Exception):
    """No token from the provider; the message names the endpoint and the provider's reason."""


class ClientCredentialsToken:
    """The access token kgw presents upstream (see the module doc)."""

    def __init__(self, config: Any, timeout_s: float = 10.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0  # time.monotonic() after which the token is replaced
        self._endpoint: str | None = config.token_endpoint_url
        #: tokens fetched so far (a test and an operator can see refreshes happen)
        self.fetches = 0

    async def token(self) -> str:
        """A token with most of its lifetime left; fetched on a worker thread when needed."""
        token = self._token
        if token is not None and time.monotonic() < self._refresh_at:
            return token
        return await trio.to_thread.run_sync(self._current, abandon_on_cancel=True)

    def _current(self) -> str:
        with self._lock:
            if self._token is not None and time.monotonic() < self._refresh_at:
                return self._token  # another caller fetched it meanwhile
            started = time.monotonic()
            token, lifetime_s = self.fetch()
            self._token = token
            self._refresh_at = started + lifetime_s * self.config.refresh_window_factor
            self.fetches += 1
            log.info("fetched kgw's upstream OAUTHBEARER token for client %s (valid %ds)",
                     self.config.client_id, int(lifetime_s))
            return token

    def endpoint(self) -> str:
        """The token endpoint: configured, or found by OpenID Connect discovery (blocking; cached)."""
        if self._endpoint is None:
            url = self.config.issuer_url.rstrip("/") + "/.well-known/openid-configuration"
            document = self._get_json(url)
            endpoint = document.get("token_endpoint") if isinstance(document, dict) else None
            if not isinstance(endpoint, str) or not endpoint:
                raise TokenUnavailable(f"{url} names no token_endpoint")
            self._endpoint = endpoint
        return self._endpoint

    def _get_json(self, url: str) -> Any:
        request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "kgw"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - configured URL
                return json.loads(response.read(1 << 20))
        except (OSError, ValueError) as exc:
            raise TokenUnavailable(f"OpenID Connect discovery at {url} failed: {exc}") from None

    def fetch(self) -> tuple[str, float]:
        """A new token and its lifetime in seconds, from the provider now (blocking)."""
        cfg = self.config
        endpoint = self.endpoint()
        form = {"grant_type": "client_credentials"}
        if cfg.scope:
            form["scope"] = cfg.scope
        basic = base64.b64encode(
            f"{urllib.parse.quote(cfg.client_id, safe='')}:{urllib.parse.quote(cfg.client_secret, safe='')}".encode()
        ).decode()
        request = urllib.request.Request(
            endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {basic}", "Accept": "application/json", "User-Agent": "kgw",
                     "Content-Type": "application/x-www-form-urlencoded"})
        what = f"token endpoint {endpoint} (client {cfg.client_id!r})"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - configured URL
                document = json.loads(response.read(1 << 20))
        except urllib.error.HTTPError as exc:
            raise TokenUnavailable(f"{what} refused the client-credentials grant: HTTP {exc.code} "
                                   f"{_provider_reason(exc)}") from None
        except (OSError, ValueError) as exc:
            raise TokenUnavailable(f"{what} failed: {exc}") from None
        token = document.get("access_token") if isinstance(document, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenUnavailable(f"{what} answered without an access_token")
        expires_in = document.get("expires_in")
        if not isinstance(expires_in, (int, float)) or isinstance(expires_in, bool) or expires_in <= 0:
            expires_in = 0.0  # unknown lifetime: used once, fetched again for the next login
        return token, float(expires_in)


def _provider_reason(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read(1 << 16))
    except (OSError, ValueError):
        return exc.reason or ""
    if not isinstance(body, dict):
        return ""
    reason = str(body.get("error", ""))
    if body.get("error_description"):
        reason += f": {body['error_description']}"
    return reason


_SOURCES: dict[Any, ClientCredentialsToken] = {}
_SOURCES_LOCK = threading.Lock()


def token_source(config: Any, timeout_s: float = 10.0) -> ClientCredentialsToken:
    """The process's token source for this ``upstream.sasl.oauthbearer`` section (one per
    distinct section: a reload with other settings gets a new one)."""
    with _SOURCES_LOCK:
        source = _SOURCES.get(config)
        if source is None:
            source = _SOURCES[config] = ClientCredentialsToken(config, timeout_s)
        return source


def token_endpoint(config: Any, timeout_s: float = 10.0) -> str:
    """The token endpoint of this section (OpenID Connect discovery when only issuer_url is
    given; blocking: for set-up code, not the event loop).

    :raises TokenUnavailable: discovery failed.
    """
    return token_source(config, timeout_s).endpoint()
