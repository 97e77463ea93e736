"""Enforcement scenarios (tests/scenarios/<api>/*.yaml, format in tests/support/scenarios.py),
each run at every version it names against the real connection of a real gateway with
the StandardAuthorizer and a fake upstream; and the coverage rule: every (API, version)
kgw advertises has at least one allowed and one denied scenario."""

from __future__ import annotations

import pytest

from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY
from tests.support.scenarios import check, load_all, run

SCENARIOS = load_all()
#: APIs with no authorization of their own (authentication and version negotiation): one
#: scenario of any outcome is enough
UNAUTHORIZED_APIS = {17: "SaslHandshake", 18: "ApiVersions", 36: "SaslAuthenticate", 71: "GetTelemetrySubscriptions",
                     72: "PushTelemetry"}


@pytest.mark.parametrize(("scenario", "version"), [pair for s in SCENARIOS for pair in s.ids()],
                         ids=lambda v: v.name if hasattr(v, "name") else f"v{v}")
async def test_scenario(scenario, version, tmp_path) -> None:
    outcome = await run(scenario, version, tmp_path)
    assert check(scenario, outcome) == [], outcome


def test_every_advertised_version_has_an_allowed_and_a_denied_scenario() -> None:
    generous = {key: VersionRange(0, 99) for key in range(200)}
    advertised = advertised_versions(generous, LOCAL_KEYS, REGISTRY, authorizer=True)
    covered: dict[tuple[int, int], set[str]] = {}
    for s in SCENARIOS:
        for _, v in s.ids():
            covered.setdefault((s.api_key, v), set()).add(s.outcome)
    missing = []
    for key, r in sorted(advertised.items()):
        for v in range(r.min, r.max + 1):
            need = {"allowed", "denied"} if key not in UNAUTHORIZED_APIS else set()
            have = covered.get((key, v))
            if have is None or not need <= have:
                missing.append(f"{REGISTRY[key].name} v{v}: has {sorted(have or ())}")
    assert missing == [], "\n".join(missing)


def test_scenarios_name_only_advertised_versions() -> None:
    generous = {key: VersionRange(0, 99) for key in range(200)}
    advertised = advertised_versions(generous, LOCAL_KEYS, REGISTRY, authorizer=True)
    stray = [f"{s.name} v{v}" for s in SCENARIOS for _, v in s.ids()
             if s.api_key not in advertised or not advertised[s.api_key].min <= v <= advertised[s.api_key].max]
    assert stray == []
