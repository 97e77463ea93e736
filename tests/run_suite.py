#!/usr/bin/env python3
"""The whole test suite in two pytest processes at once (``make test``; CI runs exactly that).

A single pytest keeps one of CI's two cores busy most of the time: much of the suite waits on
brokers, JVMs and clients.  The suite is split in two halves that share nothing: ``jvm`` (the
tests against Apache Kafka, Keycloak and the Java client) and ``tansu`` (the unit tests, then
the integration tests against tansu, Spark included; the halves took 14-15 minutes each when
this split was chosen).  Each half starts only the session
fixtures its tests need, so no broker or provider runs twice; each gets its own port range
(``KGW_TEST_PORTS``, read by tests/support/ports.py; the fixed ports of
tests/integration/test_examples.py, 9092 and 9190-9711, are below both) and its own
``--basetemp``.  Lines are printed as they come, prefixed with the half's name; when both have
ended, each half's failed and erroring tests are printed once more, last (what a client library
prints while its objects are torn down at exit would otherwise bury them); the exit status is the
first non-zero one of the two.

    .venv/bin/python tests/run_suite.py             # both halves
    .venv/bin/python tests/run_suite.py jvm         # one of them
    .venv/bin/python tests/run_suite.py -- -x       # extra pytest arguments for both
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_JVM_MARKS = "kafka or kafka_cluster or keycloak or java"

HALVES = {
    "jvm": (["tests/integration", "-m", _JVM_MARKS], "12000-21999"),
    "tansu": (["tests/unit", "tests/integration", "-m", f"not ({_JVM_MARKS})"], "22000-31999"),
}


_OUTCOME_LINE = ("FAILED ", "ERROR ")  # pytest's short test summary (-rfE, its default)


def _pump(name: str, stream, lock: threading.Lock, outcomes: list[str]) -> None:
    for line in iter(stream.readline, ""):
        if line.startswith(_OUTCOME_LINE):
            outcomes.append(f"[{name}] {line}")
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    names = argv or list(HALVES)
    unknown = [n for n in names if n not in HALVES]
    if unknown:
        print(f"unknown half {unknown[0]!r}; the halves are {', '.join(HALVES)}", file=sys.stderr)
        return 2
    base = Path(tempfile.gettempdir()) / f"kgw-tests-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)  # pytest makes --basetemp itself, not its parents
    lock = threading.Lock()
    running = []
    outcomes: list[str] = []
    summaries: dict[str, str] = {}
    started = time.monotonic()
    for name in names:
        args, ports = HALVES[name]
        env = {**os.environ, "KGW_TEST_PORTS": ports, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={base / name}",
                   *args, *extra]
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace")
        pump = threading.Thread(target=_pump, args=(name, process.stdout, lock, outcomes), daemon=True)
        pump.start()
        running.append((name, process, pump))
    status = 0
    try:
        waiting = list(running)
        while waiting:
            for entry in list(waiting):
                name, process, pump = entry
                code = process.poll()
                if code is None:
                    continue
                pump.join()
                waiting.remove(entry)
                summaries[name] = f"[{name}] exit status {code} after {time.monotonic() - started:.0f}s"
                with lock:
                    print(summaries[name], flush=True)
                status = status or code
            time.sleep(0.5)  # polling two child processes' exit
    except KeyboardInterrupt:
        for _name, process, _pump_thread in running:
            process.terminate()  # pytest stops its own fixtures' processes on the way out
        for _name, process, _pump_thread in running:
            process.wait()
        return 130
    print("== the suite's outcome ==")
    sys.stdout.writelines(outcomes)
    print("\n".join(summaries[name] for name in names), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
