"""The table of docs/metrics.md, read as data (tests/integration/test_metrics_reference.py,
tests/unit/test_deploy_monitoring.py)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|([a-z_, ]*)\| (.*) \|$", re.M)


def documented() -> dict[str, tuple[str, frozenset[str], str]]:
    """name -> (type, labels, meaning) from the table in docs/metrics.md."""
    rows = {m.group(1): (m.group(2), frozenset(x.strip() for x in m.group(3).split(",") if x.strip()), m.group(4))
            for m in _ROW.finditer(DOC.read_text())}
    assert len(rows) > 20, "the table of docs/metrics.md was not found"
    return rows
