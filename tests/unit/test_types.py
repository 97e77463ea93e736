"""The typed seams, enforced: mypy, strict, on protocol/, authz/ and metadata/ ([tool.mypy] in
pyproject.toml).  A function without annotations, a generic without its parameters or an
``Any`` returned where a type was promised fails this test."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_protocol_authz_and_metadata_type_check_strictly() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
