"""Loaded by a kgw process that bench/latency_parts.py starts (this folder first on its
PYTHONPATH): takes out the parts of the request path named in ``$KGW_WHATIF`` (comma-separated),
to measure what each costs a live request.  A what-if for measuring only: it weakens what kgw
checks, and nothing happens unless ``KGW_WHATIF`` is set.

* ``forward-only``: a Produce request on the data plane is parsed (header), routed and given its
  slot, nothing else: no inspection, no enforcement, no request counter;
* ``allow-free``: ``AuthHelper.allowed`` answers True without deciding (no memo, no metrics);
* ``no-authz-metrics``: the authorizer's metrics record nothing;
* ``no-latency``: no response's latency is observed (kgw_upstream_latency_seconds);
* ``no-rewrite``: a Produce response is not looked at for tags to rewrite;
* ``memo-free``: the decision memo answers True without looking or counting;
* ``no-counters``: nothing a request deferred is counted (kgw_requests_total, the memo's allowances);
* ``inspect-once``: every Produce request is taken for the first one the gateway walked (its
  topics, acks and timeout), so nothing is walked after it.

They patch Python.  Since the data plane's express path (``gateway/connection/_plane_steps.c``:
the usual Produce request dispatched in C, its memo asked and counted in C, its counters and
latency added to per-thread rows in C) the usual one-record Produce no longer reaches what they
patch: on the data plane they change only the requests the express path declines (and the
lanes of another class), so a ``plain:forward-only`` gateway measures about what ``plain`` does."""

import os

_WHATIF = {w for w in os.environ.get("KGW_WHATIF", "").split(",") if w}

if _WHATIF:
    import authz.metrics
    import gateway.connection.core
    import protocol.auth_helper
    from protocol.headers import parse_request_header

    unknown = _WHATIF - {"forward-only", "allow-free", "no-authz-metrics", "no-latency", "no-rewrite", "memo-free", "inspect-once", "no-counters"}
    if unknown:
        raise SystemExit(f"KGW_WHATIF: unknown {sorted(unknown)}")

    if "forward-only" in _WHATIF:
        class _Forwarded:
            expects_response = True
            broker_wait_s = 0.0

        _FORWARDED = _Forwarded()
        _dispatch = gateway.connection.core.ConnectionCore.dispatch

        def _forward_only(self, frame, to_upstream):
            if frame[4] == 0 and frame[5] == 0 and self.lane is not None and self.gw.advertised_cached is not None:
                header = parse_request_header(frame[4:])
                route = self._routes.get(header.api_key * 65536 + header.api_version)
                if route is not None:
                    self._track(header, route[1], _FORWARDED, None, len(frame))
                    to_upstream.append(frame)
                    return False
            return _dispatch(self, frame, to_upstream)

        gateway.connection.core.ConnectionCore.dispatch = _forward_only

    if "allow-free" in _WHATIF:
        protocol.auth_helper.AuthHelper.allowed = lambda self, *args, **kwargs: True

    if "no-authz-metrics" in _WHATIF:
        authz.metrics.AuthorizerMetrics.record = lambda self, *args, **kwargs: None

    if "no-latency" in _WHATIF:
        import gateway.process.metrics
        gateway.process.metrics._HistogramChild.observe = lambda self, amount: None

    if "no-rewrite" in _WHATIF:
        import protocol.apis.produce
        (_spec,) = protocol.apis.produce.SPECS
        object.__setattr__(_spec, "rewrite_response", None)

    if "memo-free" in _WHATIF:
        import authz.standard_authorizer
        authz.standard_authorizer.StandardDecisionMemo.allows = lambda self, action, later=None: True

    if "inspect-once" in _WHATIF:
        import protocol.apis.produce
        (_spec,) = protocol.apis.produce.SPECS
        _real, _first = _spec.inspect, []

        def _inspect_once(header, body):
            if not _first:
                _first.append(_real(header, body))
            return _first[0]

        object.__setattr__(_spec, "inspect", _inspect_once)

    if "no-counters" in _WHATIF:
        import gateway.connection.lane
        gateway.connection.lane.Lane.metrics = lambda self: self.deferred.clear()
