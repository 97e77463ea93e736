"""Every API kgw forwards has an authorization mapping (fails closed otherwise: an API without
``enforce`` is refused whenever an authorizer is configured, docs/authorization.md)."""

from __future__ import annotations

import pytest

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


# ----------------------------------------------------------------- version ranges (fail closed)

from protocol.apis.api_versions import KIO_VERSIONS, VersionRange, advertised_versions  # noqa: E402

#: versions kio can decode that kgw refuses on purpose, with the reason.  A new kio (or a
#: spec range edited by mistake) that widens or narrows anything else fails the test below.
DELIBERATELY_REFUSED: dict[int, tuple[set[int], str]] = {
    38: ({1, 2}, "CreateDelegationToken before v3 cannot name the token's owner: the broker would make its "
                 "requester, kgw's own account, the owner"),
}


def test_every_spec_declares_the_versions_it_was_written_for():
    for key, spec in REGISTRY.items():
        assert spec.versions is not None, spec.name
        lo, hi = spec.versions
        assert lo <= hi, spec.name


def test_kio_offers_no_version_that_no_spec_covers():
    """Fails when kio (bumped) can decode a version of a handled API outside its spec's range:
    extend the spec only after its inspection and enforcement were checked for that version."""
    uncovered = {}
    for key, spec in REGISTRY.items():
        kio = KIO_VERSIONS[key]
        lo, hi = spec.versions
        outside = {v for v in range(kio.min, kio.max + 1) if not lo <= v <= hi}
        expected = DELIBERATELY_REFUSED.get(key, (set(), ""))[0]
        if outside != expected:
            uncovered[spec.name] = sorted(outside)
    assert uncovered == {}


def test_advertised_versions_never_exceed_the_spec_whatever_the_upstream_offers():
    generous = {key: VersionRange(0, 99) for key in range(100)}
    advertised = advertised_versions(generous, LOCAL_KEYS, REGISTRY, authorizer=True)
    assert advertised[0] == VersionRange(3, 13)  # Produce up to v13 (topic ids resolved before authorizing)
    for key, r in advertised.items():
        lo, hi = REGISTRY[key].versions
        assert lo <= r.min <= r.max <= hi, REGISTRY[key].name
    assert set(advertised) <= set(REGISTRY)
    assert not set(advertised) & {27, 52, 56, 58, 62}  # inter-broker APIs never
    # a spec narrower than kio and the upstream: the spec wins
    from dataclasses import replace
    narrowed = {**REGISTRY, 0: replace(REGISTRY[0], versions=(5, 9)), 3: replace(REGISTRY[3], versions=(1, 4))}
    advertised = advertised_versions(generous, LOCAL_KEYS, narrowed, authorizer=True)
    assert advertised[0] == VersionRange(5, 9) and advertised[3] == VersionRange(1, 4)


def test_with_an_authorizer_an_api_without_enforcement_is_not_advertised():
    from dataclasses import replace
    from types import MappingProxyType

    generous = {key: VersionRange(0, 99) for key in range(100)}
    stripped = MappingProxyType({**REGISTRY, 1: replace(REGISTRY[1], enforce=None)})
    assert 1 not in advertised_versions(generous, LOCAL_KEYS, stripped, authorizer=True)
    assert 1 in advertised_versions(generous, LOCAL_KEYS, stripped, authorizer=False)


def test_kgw_can_build_a_response_for_every_advertised_version():
    """Local answers and denials are built from Java's defaults (``group_common._blank``): every
    field type of every advertised response must have one (timestamps and doubles included)."""
    from protocol.apis.group_common import _blank
    from protocol.codecs import decode_response, encode, response_class

    generous = {key: VersionRange(0, 99) for key in range(200)}
    for key, r in advertised_versions(generous, LOCAL_KEYS, REGISTRY, authorizer=True).items():
        for v in range(r.min, r.max + 1):
            body = encode(_blank(response_class(key, v)))
            decode_response(key, v, body, 0)


def test_api_versions_keeps_the_upstream_features_at_every_version():
    """Apache Kafka answers ApiVersions v3+ with supported and finalized features (tansu does
    not): kgw's answer carries them over, whatever version the client asked for."""
    from datetime import timedelta

    from kio.schema.api_versions.v4 import response as v4
    from kio.static.primitive import i16, i64

    from protocol.apis.api_versions import build_response
    from protocol.codecs import decode_response

    upstream = v4.ApiVersionsResponse(
        error_code=0, api_keys=(), throttle_time=timedelta(0),
        supported_features=(v4.SupportedFeatureKey(name="metadata.version", min_version=i16(1), max_version=i16(30)),),
        finalized_features_epoch=i64(7),
        finalized_features=(v4.FinalizedFeatureKey(name="metadata.version", max_version_level=i16(30),
                                                   min_version_level=i16(30)),),
        zk_migration_ready=False)
    advertised = {18: VersionRange(0, 4), 3: VersionRange(0, 12)}
    for version in range(0, 5):
        response = decode_response(18, version, build_response(version, advertised, upstream), 0)
        assert [(k.api_key, k.max_version) for k in response.api_keys] == [(3, 12), (18, 4)]
        if version >= 3:
            assert [f.name for f in response.supported_features] == ["metadata.version"]
            assert response.finalized_features_epoch == 7


def test_a_response_check_stays_with_the_rewrite_it_speaks_for(monkeypatch):
    """ApiSpec.response_tags lets the C pairing skip its rewrite_response: merged specs keep the
    check of the spec whose rewrite they keep (a newer rewrite without one is always asked), and a
    check without a rewrite is refused."""
    import dataclasses

    from protocol.apis import produce, registry

    def tags(_frame, _off, _version):
        return False

    def other_rewrite(_version, _frame, _off, _nodes):
        return b"rewritten"

    base = dataclasses.replace(produce.SPECS[0], response_tags=tags)
    enforcing_only = dataclasses.replace(base, rewrite_response=None, response_tags=None, enforce=None)
    kept = registry._merge(base, enforcing_only)
    assert kept.rewrite_response is base.rewrite_response and kept.response_tags is tags
    replaced = registry._merge(base, dataclasses.replace(enforcing_only, rewrite_response=other_rewrite))
    assert replaced.rewrite_response is other_rewrite and replaced.response_tags is None
    monkeypatch.setattr(produce, "SPECS", (dataclasses.replace(produce.SPECS[0], rewrite_response=None),))
    monkeypatch.setattr(registry, "_MODULES", (produce,))
    with pytest.raises(RuntimeError, match="response tags without a response rewrite"):
        registry._build()
