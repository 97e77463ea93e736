"""deploy/pick_python.py: which interpreter ``make setup`` builds the virtualenv from.

The candidates here are small executables that answer the probe as an interpreter of a given
build would; the real ones on this machine are checked last."""

from __future__ import annotations

import importlib.util
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pick_python():
    spec = importlib.util.spec_from_file_location("pick_python", REPO / "deploy" / "pick_python.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _interpreter(where: Path, name: str, answer: str) -> str:
    """An executable that prints ``answer`` to the probe (any ``-c`` code)."""
    path = where / name
    path.write_text(f"#!/bin/sh\necho \"{answer}\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_an_optimized_build_of_the_same_version_is_chosen(pick_python, tmp_path: Path) -> None:
    plain = _interpreter(tmp_path, "python3", "CPython 3.11 1 1 -")
    distro = _interpreter(tmp_path, "python3.11", "CPython 3.11 1 1 a_distribution's_build")
    said: list[str] = []
    assert pick_python.pick(plain, [plain, distro], said.append) == distro
    assert any("built without optimizations" in line for line in said)


def test_python3_when_it_is_the_only_good_one(pick_python, tmp_path: Path) -> None:
    plain = _interpreter(tmp_path, "python3", "CPython 3.11 1 1 -")
    other_version = _interpreter(tmp_path, "python3.12", "CPython 3.12 1 1 configured_--enable-optimizations")
    no_headers = _interpreter(tmp_path, "python3.11", "CPython 3.11 1 0 a_distribution's_build")
    pypy = _interpreter(tmp_path, "pypy3", "PyPy 3.11 1 1 a_distribution's_build")
    said: list[str] = []
    assert pick_python.pick(plain, [plain, other_version, no_headers, pypy], said.append) == plain
    assert any("not CPython 3.11: skipped" in line for line in said)
    assert any("no C headers" in line for line in said)


def test_python3_itself_when_it_is_optimized(pick_python, tmp_path: Path) -> None:
    built = _interpreter(tmp_path, "python3", "CPython 3.11 1 1 configured_--enable-optimizations")
    distro = _interpreter(tmp_path, "python3.11", "CPython 3.11 1 1 a_distribution's_build")
    assert pick_python.pick(built, [built, distro], lambda _line: None) == built


def test_the_probe_on_this_interpreter(pick_python) -> None:
    """The probe's own answer, from a real interpreter: five fields, as pick() reads them."""
    out = subprocess.run([sys.executable, "-c", pick_python._PROBE], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "CPython" and out[1] == "%d.%d" % sys.version_info[:2]
    assert out[2:4] == ["1", "1"]  # this interpreter built kgw's C parts in a venv
    assert len(out) == 5
