"""The layers of docs/architecture.md, enforced: import-linter's contracts in pyproject.toml
(gateway -> protocol -> metadata | configs -> authz, no import cycles, the Spark package
kept apart) must all be kept."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
