"""Consumer-group APIs with broker-side waits: JoinGroup holds a request up to the rebalance timeout."""

from __future__ import annotations

from dataclasses import replace

from protocol.apis.base import ApiSpec, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.headers import RequestHeader

__all__ = ["SPECS"]


def _inspect_join(header: RequestHeader, frame: memoryview) -> RequestInfo:
    info = inspect_decoded(header, frame)
    request = info.decoded
    timeout = getattr(request, "rebalance_timeout", None) or request.session_timeout
    return replace(info, broker_wait_s=max(timeout.total_seconds(), 0.0))


SPECS = (ApiSpec(11, "JoinGroup", _inspect_join),)
