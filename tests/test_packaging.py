"""specviz as a package: pyproject.toml reads the version from specviz/__init__.py and the runtime dependencies from
requirements.txt (one place each), and `pip install -e .` then `specviz ...` works, tried for real in a throwaway
venv (--system-site-packages for the installed dependencies; --no-deps, --no-build-isolation and --no-index, so
nothing reaches the network)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
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


def requirement_lines(name: str) -> list[str]:
    """A requirements file's requirement strings: no comments, blank lines or pip options (-e ., -r ...)."""
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith(("#", "-"))]


def installed_by(followed: list[str], no_deps: list[str]) -> set[str]:
    """The distributions pip installs for these requirement strings: each named one and, for `followed`, what it
    requires in turn (read from the metadata installed here; extras left out). `no_deps`: installed with --no-deps."""
    from packaging.requirements import Requirement

    seen, todo = requirement_names(no_deps), list(requirement_names(followed))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonical(req.name))
    return seen


def imports_in_tests() -> dict[str, set[str]]:
    """Top-level third-party modules the test files import (anywhere in a file) -> the files importing them."""
    files = sorted((REPO / "tests").rglob("*.py"))
    ours = {"specviz", "tests", "pages", "app", "scripts", *(f.stem for f in files)}
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - ours - sys.stdlib_module_names:
                found.setdefault(top, set()).add(path.name)
    return found


def not_installed(imports: dict[str, set[str]], installed: set[str]) -> dict[str, set[str]]:
    """The imported modules that no distribution in `installed` provides."""
    providers = importlib.metadata.packages_distributions()
    return {top: where for top, where in imports.items() if not {canonical(d) for d in providers.get(top, [])} & installed}


def test_every_package_the_tests_import_is_installed_by_a_requirements_file():
    """On a fresh machine, scripts/test.sh installs the requirements files and nothing else: a package the tests
    import that none of them brings (hypothesis, once) fails the suite at collection there, though not here."""
    app, dev, models = (requirement_lines(n) for n in ("requirements.txt", "requirements-dev.txt", "requirements-models.txt"))
    pinned = [line for line in dev if requirement_names([line]) == {"hypothesis"}]
    assert pinned, "requirements-dev.txt must pin hypothesis"
    without = installed_by(app + [line for line in dev if line not in pinned], models)
    imports = imports_in_tests()
    assert not_installed(imports, without | installed_by(pinned, [])) == {}
    # known-bad control: without its line in requirements-dev.txt, hypothesis is missed
    assert "test_hostile_recordings.py" in not_installed(imports, without).get("hypothesis", set())


def test_version_flag_prints_the_one_version(capsys):
    from specviz.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"python -m specviz {specviz.__version__}"
    with pytest.raises(SystemExit):
        main(["--version"], prog="specviz")
    assert capsys.readouterr().out.strip() == f"specviz {specviz.__version__}"


NEEDS_AN_INDEX = re.compile(r"No matching distribution found for (\S+)|Could not find a version that satisfies the requirement (\S+)")


def _install_problem() -> str | None:
    """Why this Python cannot do the offline editable install at all (a reason to skip), or None."""
    if importlib.util.find_spec("pip") is None:
        return "pip is not installed: the test installs the checkout with it"
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed: the editable install builds with it (--no-build-isolation)"
    release = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    if release < (64,):
        return f"setuptools {version} has no editable backend for pyproject projects (PEP 660, setuptools 64)"
    if release < (70, 1) and importlib.util.find_spec("wheel") is None:  # 70.1 took bdist_wheel in
        return f"setuptools {version} builds editable wheels with the wheel package, which is not installed"
    return None


def _needs_an_index(pip_output: str) -> str | None:
    """Why a failed pip run failed for want of a package index (a reason to skip, not a fault of the checkout), or None."""
    found = NEEDS_AN_INDEX.search(pip_output)
    if found is None:
        return None
    return f"pip needed {found.group(1) or found.group(2)} from a package index it cannot reach (the install runs with --no-index)"


def test_a_pip_that_needs_an_index_is_told_from_a_broken_install():
    """What pip 23-25 print when a requirement is on no reachable index: a skip with the requirement named; a build
    that fails for its own reasons stays a failure (known-bad control)."""
    build_deps = (
        "  × pip subprocess to install build dependencies did not run successfully.\n"
        "      ERROR: Could not find a version that satisfies the requirement setuptools>=64 (from versions: none)\n"
        "      ERROR: No matching distribution found for setuptools>=64\n"
    )
    assert "setuptools>=64" in _needs_an_index(build_deps) and "index" in _needs_an_index(build_deps)
    assert "wheel" in _needs_an_index("ERROR: No matching distribution found for wheel\n")
    broken = "error: subprocess-exited-with-error\n  SyntaxError: invalid syntax (pyproject.toml)\nerror: metadata-generation-failed\n"
    assert _needs_an_index(broken) is None


def test_pip_install_editable_gives_a_specviz_command(tmp_path, tiny_dir):
    """`pip install -e .` in a fresh venv, then `specviz --version`, `specviz --help` and a tiny `specviz generate`
    from outside the checkout; the installed metadata names the same dependencies as requirements.txt."""
    problem = _install_problem()
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
        if install.returncode != 0 and (offline := _needs_an_index(install.stdout + install.stderr)):
            pytest.skip(offline)
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
