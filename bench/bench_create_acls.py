"""One-ACL CreateAcls and DeleteAcls through a running gateway, with N ACLs already stored
(issue 17 item 5: 1.9 ms with none, 6.8 ms at 20k, 37 ms at 100k when every write copied the
whole index).  End to end: the request over TCP, authorization, the durable append to the
directory metadata log (write + fsync), the index change, the answer.

    .venv/bin/python bench/bench_create_acls.py [--sizes 0 20000 100000] [--writes 200]

kgw runs in front of tansu with the StandardAuthorizer (``super.users: User:ANONYMOUS``, so
the PLAINTEXT client may write ACLs); the stored ACLs are bench_restart.py's mix, imported
with ``kgw metadata import`` before the start.  Prints one line per size: median and p99 in ms
of ``--writes`` creates, then of as many deletes (each deleting one of the created ACLs by an
exact filter), and the gateway's RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import rss_mb, scratch, start_kgw, start_tansu  # noqa: E402
from bench_restart import document  # noqa: E402
from kio.static.primitive import i8  # noqa: E402

from protocol.codecs import nested, request_class  # noqa: E402
from tests.support.raw_kafka import RawConnection  # noqa: E402

KGW = str(Path(sys.executable).parent / "kgw")
AUTHZ = ("authorizer: {class_name: authz.standard_authorizer:StandardAuthorizer, "
         "config: {super.users: 'User:ANONYMOUS'}}\n")


def create(conn: RawConnection, topic: str) -> int:
    cls = request_class(30, 3)
    c = nested(cls, "creations")(resource_type=i8(2), resource_name=topic, resource_pattern_type=i8(3),
                                 principal="User:bench", host="*", operation=i8(3), permission_type=i8(3))
    return conn.call(30, 3, cls(creations=(c,))).results[0].error_code


def delete(conn: RawConnection, topic: str) -> int:
    cls = request_class(31, 3)
    f = nested(cls, "filters")(resource_type_filter=i8(2), resource_name_filter=topic, pattern_type_filter=i8(3),
                               principal_filter="User:bench", host_filter="*", operation=i8(3),
                               permission_type=i8(3))
    result = conn.call(31, 3, cls(filters=(f,))).filter_results[0]
    assert len(result.matching_acls) == 1, result
    return result.error_code


def timed(fn, conn: RawConnection, names: list[str]) -> list[float]:
    out = []
    for name in names:
        t0 = time.perf_counter()
        if fn(conn, name) != 0:
            raise RuntimeError(f"{fn.__name__} {name} failed")
        out.append((time.perf_counter() - t0) * 1000)
    return sorted(out)


def pct(v: list[float], q: float) -> float:
    return v[min(len(v) - 1, int(len(v) * q))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 20_000, 100_000])
    ap.add_argument("--writes", type=int, default=200)
    args = ap.parse_args(argv)
    with scratch("kgw-create-acls-") as (tmp, procs):
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        for size in args.sizes:
            meta = tmp / f"meta-{size}"
            if size:
                doc = tmp / f"acls-{size}.json"
                doc.write_text(json.dumps(document(size)))
                subprocess.run([KGW, "metadata", "import", str(doc), "--data-dir", str(meta)], check=True,
                               capture_output=True)
            kgw, port = start_kgw(tmp, tansu_port, name=f"kgw-{size}", extra_config=AUTHZ, meta_dir=meta)
            procs.append(kgw)
            names = [f"bench-acl-{size}-{i}" for i in range(args.writes)]
            with RawConnection(f"127.0.0.1:{port}") as conn:
                timed(create, conn, [f"warm-{size}"])
                creates = timed(create, conn, names)
                deletes = timed(delete, conn, names)
            print(json.dumps({"acls": size, "create_p50_ms": round(pct(creates, 0.5), 2),
                              "create_p99_ms": round(pct(creates, 0.99), 2),
                              "delete_p50_ms": round(pct(deletes, 0.5), 2),
                              "delete_p99_ms": round(pct(deletes, 0.99), 2),
                              "kgw_rss_mb": round(rss_mb(kgw.pid), 1)}), flush=True)
            kgw.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
