"""Kafka's client-quota precedence (metadata/client_quotas.py), property-tested against a model
written another way: of the entities that describe a (user, client id) -- each component its
name or the default, nothing else -- the one whose user component is most specific (named,
then default, then absent), then whose client-id component is, wins; its named components say
whose traffic one rate measures."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.client_quotas import resolve, resolve_ip
from metadata.image import quota_entity

NAMES = ["alice", "bob", None]
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]

components = st.sampled_from(["user", "client-id", "both"])
entities = st.builds(
    lambda kind, user, client: quota_entity(
        [("user", user)] * (kind in ("user", "both")) + [("client-id", client)] * (kind in ("client-id", "both"))),
    components, st.sampled_from(NAMES), st.sampled_from(NAMES))
quota_maps = st.dictionaries(entities, st.dictionaries(st.sampled_from(KEYS), st.floats(1, 1e9), min_size=1),
                             max_size=12)


def model(quotas, user: str, client: str, key: str):
    best = None
    for entity, values in quotas.items():
        parts = dict(entity)
        if key not in values or set(parts) - {"user", "client-id"}:
            continue
        ranks = []
        for etype, actual in (("user", user), ("client-id", client)):
            if etype not in parts:
                ranks.append(2)
            elif parts[etype] is None:
                ranks.append(1)
            elif parts[etype] == actual:
                ranks.append(0)
            else:
                break
        else:
            if best is None or tuple(ranks) < best[0]:
                tags = (user if "user" in parts else "", client if "client-id" in parts else "")
                best = (tuple(ranks), values[key], tags)
    return None if best is None else (best[1], best[2])


@settings(max_examples=400)
@given(quota_maps, st.sampled_from(["alice", "bob", "carol"]), st.sampled_from(["alice", "bob", "etl", ""]),
       st.sampled_from(KEYS))
def test_resolution_follows_kafkas_eight_levels(quotas, user, client, key):
    found = resolve(quotas, user, client, key)
    expected = model(quotas, user, client, key)
    assert (None if found is None else (found.value, found.tags)) == expected


def test_the_levels_in_kafkas_documented_order():
    quotas = {}
    order = [(("user", "u"), ("client-id", "c")), (("user", "u"), ("client-id", None)), (("user", "u"),),
             (("user", None), ("client-id", "c")), (("user", None), ("client-id", None)), (("user", None),),
             (("client-id", "c"),), (("client-id", None),)]
    for i, entity in enumerate(reversed(order)):
        quotas[quota_entity(entity)] = {"producer_byte_rate": float(8 - i)}
    seen = []
    while quotas:
        found = resolve(quotas, "u", "c", "producer_byte_rate")
        seen.append((found.value, found.level))
        del quotas[next(e for e, v in quotas.items() if v["producer_byte_rate"] == found.value)]
    assert seen == [(1.0, "user,client-id"), (2.0, "user,client-id-default"), (3.0, "user"),
                    (4.0, "user-default,client-id"), (5.0, "user-default,client-id-default"), (6.0, "user-default"),
                    (7.0, "client-id"), (8.0, "client-id-default")]


def test_an_address_has_its_own_connection_rate_else_the_default():
    quotas = {(("ip", None),): {"connection_creation_rate": 5.0}, (("ip", "10.0.0.1"),): {"connection_creation_rate": 1.0}}
    assert resolve_ip(quotas, "10.0.0.1").value == 1.0 and resolve_ip(quotas, "10.0.0.2").value == 5.0
    assert resolve_ip({}, "10.0.0.1") is None
