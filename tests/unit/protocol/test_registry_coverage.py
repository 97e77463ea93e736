"""Every API kgw forwards has an authorization mapping (fails closed otherwise: an API without
``enforce`` is refused whenever an authorizer is configured, fact sheet §1)."""

from __future__ import annotations

from protocol.apis.registry import LOCAL_KEYS, REGISTRY

#: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: their own issue (config APIs).
CONFIG_KEYS = frozenset({32, 33, 44})


def _unmapped() -> dict[int, str]:
    return {
        key: spec.name
        for key, spec in sorted(REGISTRY.items())
        if spec.enforce is None and not spec.answered_locally and key not in LOCAL_KEYS and key not in CONFIG_KEYS
    }


def test_every_forwarded_api_has_an_enforcer():
    assert _unmapped() == {}


def test_locally_answered_apis_have_an_answer():
    for key, spec in REGISTRY.items():
        if spec.answered_locally and key != 18:  # ApiVersions is answered by the connection itself
            assert spec.answer is not None, spec.name
