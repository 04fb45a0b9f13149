"""The layout's arrows, checked over the whole import graph of specviz/, pages/ and app.py, parsed with ast, so
imports inside functions (and under TYPE_CHECKING) count: a cycle held apart by a function-level import is
still a cycle.

Layers, bottom up (a module may import its own layer and the layers its arrow names, nothing else):
  core      the algorithm in plain torch                                   -> nothing in specviz
  drafters  the drafter protocol's implementations and their table          -> core
  models    the only transformers code                                      -> core
  viz       records -> frames -> figures, no streamlit                      -> core
  config    the run's config (reads the drafter table)                      -> core, drafters
  recording  the run's file format                                         -> config, core
  record_json  a run's records and stats as the CLI's JSON                  -> core
  runs      assembly: config + models -> a decoder                         -> config, core, drafters, models
  experiments  what measures (measure, bench, cost_profile, lab, numerics)  -> config, core, drafters, models, runs
            (a model turn is handed in: specviz.core.protocols.Turn)
  workshop  what a shared server needs (policy, serving, jobs, baselines,   -> config, core, recording, runs
            saved_runs, room): plain Python, no streamlit
  cli       the command line (specviz/cli/: a module per subcommand): every  -> all of the above, viz
            layer below the UI
  ui        the only streamlit code besides the pages and app.py            -> everything above
  pages     draw only                                                       -> ui, viz
  app       navigation                                                      -> ui
The package root (specviz/__init__.py: the version) may be read by anyone. No cycles anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BELOW_UI = {"core", "drafters", "models", "viz", "config", "recording", "record_json", "runs", "experiments", "workshop", "cli", "main"}
ARROWS: dict[str, set[str]] = {
    "root": set(),
    "core": set(),
    "drafters": {"core"},
    "models": {"core"},
    "viz": {"core"},
    "config": {"core", "drafters"},
    "recording": {"config", "core"},
    "record_json": {"core"},
    "runs": {"config", "core", "drafters", "models"},
    "workshop": {"config", "core", "recording", "runs"},
    "experiments": {"config", "core", "drafters", "models", "runs"},
    "cli": BELOW_UI - {"cli", "main"},
    "main": {"cli"},
    "ui": BELOW_UI - {"main"},
    "pages": {"ui", "viz"},
    "app": {"ui"},
}
STREAMLIT_OK = {"ui", "pages", "app"}
TRANSFORMERS_OK = {"models"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """specviz.core.tree -> core; specviz.experiments.bench -> experiments; specviz.__main__ -> main; pages.x -> pages; app -> app."""
    parts = module.split(".")
    if parts[0] != "specviz":
        return parts[0]
    if len(parts) == 1:
        return "root"
    return "main" if parts[1] == "__main__" else parts[1]


def imports_of(path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(specviz modules imported anywhere in the file, top-level third-party packages imported)."""
    inner, outer = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names = submodules if submodules and len(submodules) == len(node.names) else [node.module, *submodules]
        else:
            continue
        for name in names:
            (inner if name.split(".")[0] == "specviz" else outer).add(name if name.split(".")[0] == "specviz" else name.split(".")[0])
    return {n for n in inner if n in known}, outer


@pytest.fixture(scope="module")
def graph() -> dict[str, tuple[set[str], set[str]]]:
    files = [*sorted((REPO / "specviz").rglob("*.py")), *sorted((REPO / "pages").glob("*.py")), REPO / "app.py"]
    known = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, known) for p in files}


def arrow_violations(graph: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    wrong = []
    for module, (inner, _) in graph.items():
        allowed = ARROWS.get(layer(module))
        if allowed is None:
            wrong.append(f"{module}: no layer in ARROWS (add it to tests/test_boundaries.py)")
            continue
        wrong += [f"{module} -> {other}" for other in inner if layer(other) not in allowed | {layer(module), "root"}]
    return sorted(wrong)


def find_cycle(graph: dict[str, tuple[set[str], set[str]]]) -> list[str] | None:
    edges = {m: {o for o in inner if o != m and o in graph} for m, (inner, _) in graph.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for o in sorted(edges[m]):
            if state.get(o) == 1:
                return path[path.index(o) :] + [o]
            if o not in state and (cycle := visit(o)):
                return cycle
        state[m] = 2
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_every_import_follows_an_arrow(graph):
    wrong = arrow_violations(graph)
    assert not wrong, "imports against the layout's arrows:\n" + "\n".join(wrong)


def test_no_import_cycles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_streamlit_and_transformers_stay_in_their_rooms(graph):
    for module, (_, outer) in graph.items():
        if "streamlit" in outer:
            assert layer(module) in STREAMLIT_OK, f"{module} imports streamlit; only specviz.ui, pages and app.py may"
        if "transformers" in outer:
            assert layer(module) in TRANSFORMERS_OK, f"{module} imports transformers; only specviz.models may"


def test_pages_import_only_ui_and_viz(graph):
    for module, (inner, _) in graph.items():
        if layer(module) == "pages":
            assert {layer(o) for o in inner} <= {"ui", "viz"}, f"{module} imports {sorted(inner)}"


def test_known_bad_graphs_fail(tmp_path):
    """The checks catch what they claim to: an import inside a function is seen, core importing the UI breaks an
    arrow, a page importing core breaks an arrow, and two modules importing each other are a cycle."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from specviz.ui.session import Run\n", encoding="utf-8")
    inner, _ = imports_of(probe, {"specviz.ui.session"})
    assert inner == {"specviz.ui.session"}
    bad = {"specviz.core.decoding": (inner, set()), "specviz.ui.session": (set(), set()), "pages.x": ({"specviz.core.decoding"}, set())}
    assert arrow_violations(bad) == ["pages.x -> specviz.core.decoding", "specviz.core.decoding -> specviz.ui.session"]
    cyclic = {"specviz.ui.a": ({"specviz.ui.b"}, set()), "specviz.ui.b": ({"specviz.ui.a"}, set())}
    assert find_cycle(cyclic) == ["specviz.ui.a", "specviz.ui.b", "specviz.ui.a"]


def test_the_embedded_target_has_one_name():
    from specviz.config import EMBEDDED_TARGET
    from specviz.models import EMBEDDED_TARGET as MODELS_EMBEDDED

    assert EMBEDDED_TARGET == MODELS_EMBEDDED
