"""What a refused request costs kgw: a client sending denied Produce requests over and over must
not make kgw redo per-schema work for each answer (typing.get_type_hints on kio's classes took
three quarters of a denied Produce's dispatch, ~190 of 250 us)."""

from __future__ import annotations

import typing

from authz.principal import KafkaPrincipal
from tests.unit.gateway.test_connection_core import _core, _gateway, _learn_versions, _produce


def test_a_denied_produce_answer_redoes_no_schema_work(monkeypatch):
    gw = _gateway(authorizer={})
    gw.authorizer.complete_initial_load()  # no ACL: everything denied
    _learn_versions(gw)
    core = _core(gw)
    core.principal = KafkaPrincipal("User", "mallory-denied-produce")
    out: list = []
    assert core.dispatch(_produce("bench-denied-produce", 1), out) is True  # answered by kgw: denied
    assert out == [] and core.pending[0].data is not None

    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda *a, **k: calls.append(a) or real(*a, **k))
    for correlation_id in range(2, 12):
        assert core.dispatch(_produce("bench-denied-produce", correlation_id), out) is True
    assert out == [] and len(core.pending) == 11
    assert calls == []
