"""The ``kgw`` executable's entry point, and ``python -m gateway.cli``'s: the gateway's process
starts here, before anything imports kio.

kio registers a Hypothesis strategy for each of its types whenever Hypothesis is importable (a
test-only dependency, present in development installs such as ``make setup``'s ``.venv``), and
importing Hypothesis runs its plugins: Trio's turns on the deterministic scheduling meant for
property tests (every batch of runnable tasks sorted and shuffled by a seeded generator, on every
turn of the loop), and the whole import costs a third of a second of every start.  A gateway must
run as the production image runs it, where Hypothesis is not installed."""

from __future__ import annotations

import sys


def keep_test_hooks_out() -> None:
    """Make ``import hypothesis`` fail in this process (kio then registers nothing): only
    before kio is loaded, and only when nothing here already uses Hypothesis (a test run calling
    :func:`main` in process)."""
    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # None: the import raises


def main(argv: list[str] | None = None) -> int:
    keep_test_hooks_out()
    from gateway.cli.main import main as run  # (imports kio)

    return run(argv)
