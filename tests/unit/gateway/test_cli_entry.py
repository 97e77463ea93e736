"""The gateway's process starts as the production image runs it: a development install has
Hypothesis (a test dependency), and kio imports it whenever it can, which runs Hypothesis's
plugins; Trio's then makes the scheduler deterministic (every batch of runnable tasks sorted and
shuffled on every turn) and the import costs a third of a second of every start.  Both ways a
gateway is started (the ``kgw`` executable and ``python -m gateway.cli``, which workers use) must
keep it out, as must nothing else that runs in a test's own process."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]

# Runs a ``kgw check`` the way ``how`` starts kgw, then reports what its process loaded.
_PROBE = """
import atexit, json, runpy, sys
def report():
    import trio._core._run as run
    print("PROBE " + json.dumps({"hypothesis": sys.modules.get("hypothesis") is not None,
                                 "deterministic": run._ALLOW_DETERMINISTIC_SCHEDULING,
                                 "kio": "kio.static._phantom" in sys.modules}))
atexit.register(report)
how, config = sys.argv[1:]
sys.argv = ["kgw", "check", "--config", config]
if how == "module":
    runpy.run_module("gateway.cli", run_name="__main__", alter_sys=True)
else:
    from importlib.metadata import entry_points
    (script,) = entry_points(group="console_scripts", name="kgw")
    sys.exit(script.load()())
"""


def _config(tmp_path: Path) -> str:
    path = tmp_path / "kgw.yaml"
    path.write_text(yaml.safe_dump({
        "listeners": [{"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    }))
    return str(path)


@pytest.mark.parametrize("how", ["module", "script"])
def test_a_gateway_process_runs_without_hypothesis_hooks(tmp_path, how):
    assert importlib.util.find_spec("hypothesis") is not None, "the test needs Hypothesis installed to mean anything"
    done = subprocess.run([sys.executable, "-c", _PROBE, how, _config(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("PROBE ")]
    loaded = json.loads(line.removeprefix("PROBE "))
    assert loaded == {"hypothesis": False, "deterministic": False, "kio": True}, (loaded, done.stdout)


def test_an_entry_in_a_process_that_uses_hypothesis_leaves_it_alone():
    """A test calling the entry in process (Hypothesis already imported) keeps its Hypothesis."""
    import hypothesis

    from gateway.cli.entry import keep_test_hooks_out

    keep_test_hooks_out()
    assert sys.modules["hypothesis"] is hypothesis
