"""Authorizer benchmark (run by hand; not part of the test suite).

Theory of operation
-------------------
(a) Kafka's ``AuthorizerBenchmark`` worst case, rebuilt for
    ``StandardAuthorizer``: N resources ``foo-bar35_resource-<i>`` (every 10th
    a GROUP, every 5th PREFIXED), each with ``--acls`` ALLOW READ ACLs for
    ``User:test-user``, ``User:test-user1`` … and DENY copies with probability
    ``--deny``%, plus 1000 host-specific ALLOW/DENY ACLs on the prefix
    ``foo-bar35_resource-`` and N/10 host-specific ones on ``*``.  The timed
    action is WRITE on ``foo-bar35_resource-95`` for ``User:test-user`` from
    127.0.0.1: nothing allows it, so every candidate is visited and the
    answer is DefaultDeny.  Timed with the decision cache **off** (every call
    walks the index) and on.  ``authorize_by_resource_type(READ, TOPIC)`` from
    127.0.0.2 is timed cold (first call on a fresh snapshot, which builds the
    per-group summaries), warm with its memo off, and memoized.
(b) Hot path: one 100-action batch (distinct topics, all allowed by a literal
    ACL) repeated, with the decision cache on and off; also single-action
    calls.  Reported as decisions per second.
(c) ``load_snapshot`` of 100k ACLs (index built off to the side and swapped).

Metrics are registered, as in production.  The audit logger is set to
WARNING for (a) so the figures measure the decision itself: at Kafka's default
INFO level every denial formats and emits one audit line, whose cost is
reported separately (``audit line µs``).  (b) runs at INFO (only denials are
logged; its actions are all allowed).

Usage::

    .venv/bin/python bench/bench_authorizer.py                # N = 10k, 50k, 200k
    .venv/bin/python bench/bench_authorizer.py --sizes 10000  # quick run
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import prometheus_client  # noqa: E402

from authz.acl import (  # noqa: E402
    AccessControlEntry,
    AclBinding,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as PT,
    ResourcePattern,
    ResourceType as RT,
)
from authz.authorizer import Action, AuthorizableRequestContext  # noqa: E402
from authz.principal import KafkaPrincipal  # noqa: E402
from authz.standard_authorizer import StandardAuthorizer  # noqa: E402

PREFIX = "foo-bar35_resource-"
PRINCIPAL = "User:test-user"


def kafka_benchmark_acls(resources: int, acls_per_resource: int, deny_pct: float, rng: random.Random) -> dict:
    out: dict[uuid.UUID, AclBinding] = {}

    def add(rt, name, pt, principal, host, perm):
        out[uuid.UUID(int=rng.getrandbits(128))] = AclBinding(
            ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, Op.READ, perm)
        )

    def deny() -> bool:
        return rng.random() * 100.0 < deny_pct

    principals = [PRINCIPAL + ("" if i == 0 else str(i)) for i in range(acls_per_resource)]
    for i in range(resources):
        rt = RT.GROUP if i % 10 == 0 else RT.TOPIC
        pt = PT.PREFIXED if i % 5 == 0 else PT.LITERAL
        name = PREFIX + str(i)
        for p in principals:
            add(rt, name, pt, p, "*", Perm.ALLOW)
            if deny():
                add(rt, name, pt, p, "*", Perm.DENY)
    for h in range(1000):
        add(RT.TOPIC, PREFIX, PT.PREFIXED, PRINCIPAL, f"127.0.0.{h}", Perm.ALLOW)
        if deny():
            add(RT.TOPIC, PREFIX, PT.PREFIXED, PRINCIPAL, f"127.0.0.{h}", Perm.DENY)
    for h in range(resources // 10):
        host = f"127.0.0{h}"  # sic: Kafka's benchmark omits the dot
        if host == "127.0.0.2":
            continue
        add(RT.TOPIC, "*", PT.LITERAL, PRINCIPAL, host, Perm.ALLOW)
        if deny():
            add(RT.TOPIC, "*", PT.LITERAL, PRINCIPAL, host, Perm.DENY)
    return out


def context(host: str, principal: str = PRINCIPAL) -> AuthorizableRequestContext:
    t, _, n = principal.partition(":")
    return AuthorizableRequestContext(
        "listener", "PLAINTEXT", KafkaPrincipal(t, n), ipaddress.ip_address(host), 0, 1, "someclient", 1
    )


def per_call_us(fn, min_time: float = 0.3) -> float:
    """Median over 5 rounds of the mean time per call, in µs."""
    n = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 > min_time / 5 or n >= 1 << 22:
            break
        n *= 2
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


def make_authorizer(bindings: dict, cache_size: int) -> tuple[StandardAuthorizer, float]:
    a = StandardAuthorizer(decision_cache_size=cache_size)
    a.configure({})
    a.monitor(prometheus_client.CollectorRegistry())
    gc.collect()
    t0 = time.perf_counter()
    a.load_snapshot(bindings)
    elapsed = time.perf_counter() - t0
    a.complete_initial_load()
    return a, elapsed


def bench_kafka_case(resources: int, acls_per_resource: int, deny_pct: float) -> dict:
    rng = random.Random(42)
    bindings = kafka_benchmark_acls(resources, acls_per_resource, deny_pct, rng)
    a, load_s = make_authorizer(bindings, cache_size=0)
    ctx = context("127.0.0.1")
    actions = [Action(ResourcePattern(RT.TOPIC, PREFIX + "95", PT.LITERAL), Op.WRITE)]
    assert a.authorize(ctx, actions)[0].name == "DENIED"
    audit = logging.getLogger("kgw.authorizer")
    audit.setLevel(logging.INFO)
    with_audit = per_call_us(lambda: a.authorize(ctx, actions))
    audit.setLevel(logging.WARNING)
    uncached = per_call_us(lambda: a.authorize(ctx, actions))

    by_ctx = context("127.0.0.2")
    t0 = time.perf_counter()
    by_result = a.authorize_by_resource_type(by_ctx, Op.READ, RT.TOPIC)
    by_cold_ms = (time.perf_counter() - t0) * 1e3
    by_warm_us = per_call_us(lambda: a.authorize_by_resource_type(by_ctx, Op.READ, RT.TOPIC))

    del a
    gc.collect()
    cached_a, _ = make_authorizer(bindings, cache_size=100_000)
    cached = per_call_us(lambda: cached_a.authorize(ctx, actions))
    cached_a.authorize_by_resource_type(by_ctx, Op.READ, RT.TOPIC)
    by_memo_us = per_call_us(lambda: cached_a.authorize_by_resource_type(by_ctx, Op.READ, RT.TOPIC))
    return {
        "resources": resources,
        "acls": len(bindings),
        "load_s": load_s,
        "authorize_us": uncached,
        "authorize_cached_us": cached,
        "audit_line_us": with_audit - uncached,
        "by_type": by_result.name,
        "by_type_cold_ms": by_cold_ms,
        "by_type_warm_us": by_warm_us,
        "by_type_memo_us": by_memo_us,
    }


def bench_hot_path() -> dict:
    rng = random.Random(7)
    bindings = {}
    for i in range(10_000):
        for user in ("alice", "bob", "carol"):
            bindings[uuid.UUID(int=rng.getrandbits(128))] = AclBinding(
                ResourcePattern(RT.TOPIC, f"topic-{i}", PT.LITERAL),
                AccessControlEntry(f"User:{user}", "*", Op.READ, Perm.ALLOW),
            )
    ctx = context("10.0.0.1", "User:alice")
    batch = [Action(ResourcePattern(RT.TOPIC, f"topic-{i * 37 % 10_000}", PT.LITERAL), Op.READ) for i in range(100)]
    single = batch[:1]
    out = {"acls": len(bindings)}
    for label, size in (("cached", 100_000), ("uncached", 0)):
        a, _ = make_authorizer(bindings, size)
        assert all(r.name == "ALLOWED" for r in a.authorize(ctx, batch))
        out[f"batch_{label}"] = 100 / per_call_us(lambda: a.authorize(ctx, batch)) * 1e6
        out[f"single_{label}"] = 1 / per_call_us(lambda: a.authorize(ctx, single)) * 1e6
    return out


def bench_snapshot_load(count: int = 100_000) -> float:
    rng = random.Random(3)
    bindings = {}
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]
    for i in range(count):
        bindings[uuid.UUID(int=rng.getrandbits(128))] = AclBinding(
            ResourcePattern(RT.TOPIC if i % 4 else RT.GROUP, f"svc-{i % 20_000}-{i // 20_000}", PT.PREFIXED if i % 7 == 0 else PT.LITERAL),
            AccessControlEntry(f"User:user{i % 500}", "*" if i % 3 else f"10.0.{i % 256}.{i % 200}", ops[i % 4], Perm.DENY if i % 11 == 0 else Perm.ALLOW),
        )
    times = []
    for _ in range(3):
        _, elapsed = make_authorizer(bindings, 100_000)
        times.append(elapsed)
    return min(times)


def bench_one_change(count: int, one_principal: bool, changes: int = 200) -> dict:
    """One-ACL apply_changes (what a CreateAcls or DeleteAcls of one ACL costs the authorizer)
    at ``count`` ACLs: all of one principal (one KIP-679 group of ``count`` ACLs) or spread
    over 5,000 principals.  Median and p99 over ``changes`` creates then as many deletes."""
    def binding(i: int) -> AclBinding:
        principal = "User:alice" if one_principal else f"User:u{i % 5000}"
        return AclBinding(ResourcePattern(RT.TOPIC, f"topic-{i}", PT.PREFIXED if i % 7 == 0 else PT.LITERAL),
                          AccessControlEntry(principal, "*", Op.READ, Perm.DENY if i % 11 == 0 else Perm.ALLOW))

    rng = random.Random(5)
    a, _ = make_authorizer({uuid.UUID(int=rng.getrandbits(128)): binding(i) for i in range(count)}, 0)
    created, create_s, delete_s = [], [], []
    for j in range(changes):
        acl_id = uuid.UUID(int=rng.getrandbits(128))
        t = time.perf_counter()
        a.apply_changes({acl_id: binding(count + j)}, [])
        create_s.append(time.perf_counter() - t)
        created.append(acl_id)
    for acl_id in created:
        t = time.perf_counter()
        a.apply_changes({}, [acl_id])
        delete_s.append(time.perf_counter() - t)

    def stats(xs: list[float]) -> tuple[float, float]:
        xs = sorted(xs)
        return xs[len(xs) // 2] * 1000, xs[int(len(xs) * 0.99)] * 1000

    return {"create": stats(create_s), "delete": stats(delete_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 200_000])
    parser.add_argument("--acls", type=int, default=10, help="ALLOW ACLs per resource (Kafka's aclCount)")
    parser.add_argument("--deny", type=float, default=99.0, help="percentage of ALLOWs with a DENY copy")
    parser.add_argument("--changes-only", action="store_true", help="only (d), the cost of one ACL change")
    args = parser.parse_args()
    if args.changes_only:
        logging.getLogger("kgw.authorizer").setLevel(logging.WARNING)
        print_changes()
        return
    logging.getLogger("kgw.authorizer").setLevel(logging.WARNING)
    logging.getLogger("authz").setLevel(logging.WARNING)

    print(f"python {sys.version.split()[0]}; aclCount={args.acls}, deny={args.deny}%")
    print("\n(a) Kafka AuthorizerBenchmark worst case: WRITE on foo-bar35_resource-95 -> DefaultDeny")
    header = (
        f"{'resources':>10} {'ACLs':>10} {'load s':>7} {'authorize µs':>13} {'cached µs':>10} "
        f"{'byType':>7} {'cold ms':>8} {'warm µs':>8} {'memo µs':>8} {'audit line µs':>14}"
    )
    print(header)
    for n in args.sizes:
        r = bench_kafka_case(n, args.acls, args.deny)
        print(
            f"{r['resources']:>10,} {r['acls']:>10,} {r['load_s']:>7.2f} {r['authorize_us']:>13.2f} "
            f"{r['authorize_cached_us']:>10.2f} {r['by_type']:>7} {r['by_type_cold_ms']:>8.2f} "
            f"{r['by_type_warm_us']:>8.2f} {r['by_type_memo_us']:>8.2f} {r['audit_line_us']:>14.2f}"
        )
        gc.collect()

    logging.getLogger("kgw.authorizer").setLevel(logging.INFO)
    print("\n(b) hot path: 30k literal ACLs, all-allowed 100-action batch / single action")
    h = bench_hot_path()
    print(f"{'':>10} {'batch decisions/s':>18} {'single-call decisions/s':>24}")
    for label in ("cached", "uncached"):
        print(f"{label:>10} {h['batch_' + label]:>18,.0f} {h['single_' + label]:>24,.0f}")

    print("\n(c) load_snapshot of 100,000 ACLs (best of 3)")
    print(f"{bench_snapshot_load():.2f} s")
    print_changes()


def index_memory_mb(count: int = 100_000) -> float:
    """What the index of ``count`` ACLs (bench_snapshot_load's mix) adds to the process, in MB of RSS."""
    from authz.acl_index import AclIndex

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    rng = random.Random(3)
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]
    bindings = {uuid.UUID(int=rng.getrandbits(128)): AclBinding(
        ResourcePattern(RT.TOPIC if i % 4 else RT.GROUP, f"svc-{i % 20_000}-{i // 20_000}",
                        PT.PREFIXED if i % 7 == 0 else PT.LITERAL),
        AccessControlEntry(f"User:user{i % 500}", "*" if i % 3 else f"10.0.{i % 256}.{i % 200}", ops[i % 4],
                           Perm.DENY if i % 11 == 0 else Perm.ALLOW)) for i in range(count)}
    gc.collect()
    before = rss_mb()
    index = AclIndex.from_bindings(bindings)
    gc.collect()
    assert len(index) == count
    return rss_mb() - before


def print_changes() -> None:
    print(f"\n(e) RSS the index of 100,000 ACLs adds (bindings already loaded): {index_memory_mb():.0f} MB")
    print("\n(d) one-ACL change (apply_changes), ms: median / p99 of 200 creates, then of 200 deletes")
    print(f"{'ACLs':>8} {'shape':>22} {'create':>16} {'delete':>16}")
    for count in (0, 20_000, 100_000):
        for one in (False, True):
            r = bench_one_change(count, one)
            shape = "one principal" if one else "5,000 principals"
            print(f"{count:>8,} {shape:>22} {r['create'][0]:>7.3f} / {r['create'][1]:>6.3f} "
                  f"{r['delete'][0]:>7.3f} / {r['delete'][1]:>6.3f}")


if __name__ == "__main__":
    main()
