"""specviz as a package: pyproject.toml reads the version from specviz/__init__.py and the runtime dependencies from
requirements.txt (one place each), and `pip install -e .` then `specviz ...` works, tried for real in a throwaway
venv (--system-site-packages for the installed dependencies; --no-deps, --no-build-isolation and --no-index, so
nothing reaches the network)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import specviz
from specviz.cli.main import COMMANDS

REPO = Path(__file__).resolve().parents[1]
PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)")  # name==version, nothing else
TINY_PROMPT = "the cat sat on the mat and the dog sat on the log and the cat sat on the"


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines: list[str]) -> set[str]:
    """The distribution names of requirement strings ('torch==2.13.0', 'pandas>=2; python_version>"3"')."""
    return {canonical(re.split(r"[\s<>=!~;\[(@]", line.strip(), maxsplit=1)[0]) for line in lines if line.strip()}


def requirements_lines() -> list[str]:
    """requirements.txt without its comments and blank lines."""
    text = (REPO / "requirements.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_pyproject_reads_the_version_and_dependencies_from_their_one_place():
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project, dynamic = data["project"], data["tool"]["setuptools"]["dynamic"]
    assert "version" not in project and "dependencies" not in project, "written twice: pyproject.toml must read them"
    assert {"version", "dependencies"} <= set(project["dynamic"])
    assert dynamic["version"] == {"attr": "specviz.__version__"}
    assert dynamic["dependencies"] == {"file": ["requirements.txt"]}
    assert project["scripts"] == {"specviz": "specviz.cli.main:console"}
    assert data["tool"]["setuptools"]["packages"]["find"]["include"] == ["specviz*"]
    # requirements.txt stays the list of exact versions, in lines setuptools can read as dependencies (no pip options)
    lines = requirements_lines()
    assert lines and all(PINNED.fullmatch(line) for line in lines), [line for line in lines if not PINNED.fullmatch(line)]
    assert re.fullmatch(r"\d+\.\d+\.\d+", specviz.__version__)


def test_requirement_names_reads_names_the_way_metadata_writes_them():
    assert requirement_names(["torch==2.13.0", "Typing_Extensions>=4", "pandas ; python_version >= '3.11'", "a.b[x]==1"]) == {
        "torch", "typing-extensions", "pandas", "a-b"}  # fmt: skip
    # known-bad control: a name missing on one side is a difference
    assert requirement_names(["torch==2.13.0"]) != requirement_names(["torch==2.13.0", "pandas==3.1.1"])


def test_version_flag_prints_the_one_version(capsys):
    from specviz.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"python -m specviz {specviz.__version__}"
    with pytest.raises(SystemExit):
        main(["--version"], prog="specviz")
    assert capsys.readouterr().out.strip() == f"specviz {specviz.__version__}"


def _setuptools_problem() -> str | None:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed: the editable install builds with it (--no-build-isolation)"
    major = int(re.match(r"\d+", version).group())
    if major < 64:
        return f"setuptools {version} has no editable backend for pyproject projects (PEP 660, setuptools 64)"
    return None


def test_pip_install_editable_gives_a_specviz_command(tmp_path, tiny_dir):
    """`pip install -e .` in a fresh venv, then `specviz --version`, `specviz --help` and a tiny `specviz generate`
    from outside the checkout; the installed metadata names the same dependencies as requirements.txt."""
    problem = _setuptools_problem()
    if problem:
        pytest.skip(problem)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing but the install finds specviz
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", HF_HUB_OFFLINE="1")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120)
        python, command = venv / "bin" / "python", venv / "bin" / "specviz"

        def run(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(list(argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

        install = run(str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir", "-e", str(REPO))
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
        assert command.is_file(), "the install made no `specviz` command"

        helped = run(str(command), "--help")
        assert helped.returncode == 0 and helped.stdout.startswith("usage: specviz"), helped.stderr[-2000:]
        assert all(name in helped.stdout for name in COMMANDS)

        probe = "import json, specviz, importlib.metadata as m; print(json.dumps([specviz.__file__, m.version('specviz'), m.requires('specviz')]))"
        where = run(str(python), "-c", probe)
        assert where.returncode == 0, where.stderr[-2000:]
        path, version, requires = json.loads(where.stdout)
        assert Path(path).resolve() == (REPO / "specviz" / "__init__.py").resolve()  # editable: the checkout itself
        assert version == specviz.__version__
        assert requirement_names(requires) == requirement_names(requirements_lines())

        generated = run(str(command), "generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT,
                        "--drafter", "lookup", "-k", "3", "--max-new-tokens", "6", "--json")  # fmt: skip
        assert generated.returncode == 0, generated.stderr[-2000:]
        out = json.loads(generated.stdout)
        assert out["config"]["drafter"] == "lookup" and 0 < len(out["samples"][0]["output_ids"]) <= 6
    finally:
        shutil.rmtree(venv, ignore_errors=True)
