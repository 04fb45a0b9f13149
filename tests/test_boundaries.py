"""Layout rules, checked in a fresh interpreter: core and drafters import neither streamlit nor transformers;
viz never imports streamlit; models is where transformers lives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Imports groups of packages (and every module under each) one group after another, and reports after each
# group whether streamlit / transformers have been pulled in so far. One interpreter keeps the test cheap.
PROBE = """
import importlib, json, pkgutil, sys
report = []
for group in sys.argv[1:]:
    missing = []
    for name in group.split(","):
        try:
            package = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            missing.append(name)
            continue
        for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
            importlib.import_module(info.name)
    report.append({"group": group, "missing": missing,
                   "streamlit": "streamlit" in sys.modules, "transformers": "transformers" in sys.modules})
print(json.dumps(report))
"""

GROUPS = ["specviz.core,specviz.drafters,specviz.config,specviz.recording", "specviz.viz", "specviz.models,specviz.runs,specviz.cli,specviz.profile,specviz.numerics,specviz.bench,specviz.measure,specviz.lab"]


@pytest.fixture(scope="module")
def report() -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *GROUPS], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {r["group"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}


def test_core_drafters_config_and_recording_import_neither_streamlit_nor_transformers(report):
    found = report[GROUPS[0]]
    assert found["missing"] == []
    assert not found["streamlit"]
    assert not found["transformers"]


def test_viz_never_imports_streamlit(report):
    found = report[GROUPS[1]]
    if found["missing"]:
        pytest.skip("specviz.viz does not exist yet")
    assert not found["streamlit"]


def test_models_runs_the_cli_and_the_harness_do_not_import_streamlit(report):
    found = report[GROUPS[2]]
    assert found["missing"] == []
    assert not found["streamlit"]
    assert found["transformers"]  # the probe really imported what it claims to
