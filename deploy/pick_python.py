#!/usr/bin/env python3
"""Print the path of the interpreter ``make setup`` builds kgw's virtualenv from: an optimized
build of this machine's Python when there is one.

kgw's request path is interpreter-bound: what it adds to a request beyond the kernel's share is
mostly bytecode.  A machine often holds two builds of the same Python: the distribution's
(Debian's python3.11, like the official container images' python, compiled with profile-guided
and link-time optimization) and one compiled from source without them (pyenv's default, the
``python3`` first on this machine's PATH), which runs the same bytecode up to 1.6 times slower
(docs/benchmarks.md).  The gateway should run on the better one, as it does in its container
image.

Candidates: ``python3`` on the PATH, then ``python3.X`` of the same version on the PATH and in
/usr/bin and /usr/local/bin.  One is kept only if it is CPython of exactly ``python3``'s version
(the suite's interpreter does not change version with this choice) and can build kgw (``venv``
with ``ensurepip``, and the C headers of ``setup.py``'s extensions).  Of those, the first built
with optimizations is chosen: configured ``--enable-optimizations``, or a distribution's build
(installed under /usr, which Debian, Ubuntu and Fedora compile with PGO and LTO); otherwise
``python3``.  The choice is read from how each was built, never timed, so the same machine
always gets the same interpreter.  What was found and why goes to stderr.  ``make setup
PYTHON=/path/to/python`` skips this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

#: what each candidate must report: its version, implementation, and whether it can build kgw
_PROBE = r"""
import os, platform, sys, sysconfig
try:
    import ensurepip, venv  # noqa: F401
    venv_ok = True
except ImportError:
    venv_ok = False
headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
configured = sysconfig.get_config_var("CONFIG_ARGS") or ""
if "--enable-optimizations" in configured:
    built = "configured_--enable-optimizations"
elif sys.base_prefix == "/usr":
    built = "a_distribution's_build"
else:
    built = "-"
print(platform.python_implementation(), "%d.%d" % sys.version_info[:2], int(venv_ok), int(headers), built)
"""


def _run(python: str, code: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def candidates(first: str, version: str | None) -> list[str]:
    """``first`` (python3 on the PATH), then the other interpreters of its ``version`` found, each
    once (by the file it runs)."""
    names = [first]
    if version:
        found = shutil.which(f"python{version}")
        names += [p for p in (found, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}",
                              "/usr/bin/python3", "/usr/local/bin/python3") if p]
    out: list[str] = []
    seen: set[str] = set()
    for name in names:
        path = shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) else None)
        if path is None:
            continue
        real = os.path.realpath(path)
        if real not in seen:  # (a shim and what it runs are told apart by what they report)
            seen.add(real)
            out.append(path)
    return out


def pick(first: str | None = None, found: list[str] | None = None,
         say=lambda line: print(line, file=sys.stderr)) -> str:
    """The interpreter to build kgw's virtualenv from (``first``: python3 on the PATH; ``found``:
    the candidates, :func:`candidates` by default)."""
    first = first or shutil.which("python3") or sys.executable
    probe = _run(first, _PROBE)
    want = probe.split()[1] if probe else None
    for python in candidates(first, want) if found is None else found:
        info = probe if python == first else _run(python, _PROBE)
        if info is None:
            say(f"pick_python: {python}: does not run")
            continue
        impl, version, venv_ok, headers, built = info.split()
        if impl != "CPython" or version != want:
            say(f"pick_python: {python}: {impl} {version}, not CPython {want}: skipped")
        elif venv_ok != "1" or headers != "1":
            say(f"pick_python: {python}: {'no venv/ensurepip' if venv_ok != '1' else 'no C headers (Python.h)'}, "
                "cannot build kgw: skipped")
        elif built == "-":
            say(f"pick_python: {python}: CPython {version}, built without optimizations")
        else:
            say(f"pick_python: {python}: CPython {version}, optimized ({built.replace('_', ' ')}): chosen")
            return python
    say(f"pick_python: no optimized build found: {first}")
    return first


if __name__ == "__main__":
    print(pick())
