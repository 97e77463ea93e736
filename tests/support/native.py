"""kgw's C part (protocol/_native.c) built in place in a checkout: what ``make setup`` does for the
repository (Makefile, NATIVE_STAMP), for the copies the mutation check and the A/B benches run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def build_native(tree: Path, python: str | None = None) -> None:
    """Build ``tree``'s C extension in place with setup.py (a checkout without one has none), by
    ``python`` (the interpreter that will run it; this one by default)."""
    if (tree / "setup.py").exists():
        subprocess.run([python or sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force"], cwd=tree,
                       check=True, capture_output=True, timeout=300)
