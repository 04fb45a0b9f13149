"""The layout's arrows, checked over the whole import graph of specviz/, pages/, app.py and scripts/, parsed with ast,
so imports inside functions (and under TYPE_CHECKING) count: a cycle held apart by a function-level import is
still a cycle.

Layers, bottom up (a module may import its own layer and the layers its arrow names, nothing else):
  core      the algorithm in plain torch                                   -> nothing in specviz
  drafters  the drafter protocol's implementations and their table          -> core
  models    the only transformers code                                      -> core
  viz       records -> frames -> figures, no streamlit                      -> core
  config    the run's config (reads the drafter table)                      -> core, drafters
  recording  a run on disk: the file format (schema, build, load,         -> config, core
            field_checks) and a run's records as the CLI's JSON (record_json)
  runs      assembly: config + models -> a decoder                         -> config, core, drafters, models
  experiments  what measures (measure, timed_runs, prompts, bench, cost_profile, lab, numerics, training/)
            -> config, core, drafters, models, runs
            (a model turn is handed in: specviz.core.protocols.Turn)
  workshop  what a shared server needs (policy, queues, sessions, jobs,     -> config, core, recording, runs
            baselines, saved_runs, room/, processes): plain Python, no streamlit
  cli       the command line (specviz/cli/: a module per subcommand): every  -> all of the above, viz
            layer below the UI
  ui        the only streamlit code besides the pages and app.py            -> everything above
  pages     draw only                                                       -> ui, viz, and the constants and types
                                                                             in PAGE_MAY_IMPORT (below), by name
  app       navigation                                                      -> ui
  loadtest  the load-testing tools (protocol client, browser waits, harness, -> every layer but pages and app;
            room harness): a leaf, nothing in specviz imports it             nothing imports it but scripts and tests
  scripts   command lines (python scripts/x.py)                            -> every specviz layer, no other script
The package root (specviz/__init__.py: the version) may be read by anyone. No cycles anywhere.

Inside the UI, the features, bottom up (UI_ARROWS; a feature may import itself and what its arrow names):
  common        what every page shares (keys, widgets, the model caches, errors, budgets)   -> nothing in the ui
  step_through  the step-through page's side: session, sidebar, controls, views, replay     -> common
  room          present, follow, fork, board, push, share, saved runs                       -> step_through, common
  labs          one module per lab page (the race page's race, probe and exercise)          -> room, step_through, common
So a step_through stage that saves a round, moves a presentation on or adds a fork's point is handed those hooks by
the page (specviz.ui.step_through.controls.LiveStage); it never imports the room.

Streamlit's internals (streamlit.runtime, streamlit.proto, streamlit.web) are reached through one module,
specviz/ui/common/st_internals.py (ST_INTERNALS), so an upgrade that moves them touches one file. specviz.loadtest, a
leaf that speaks Streamlit's protocol like the tests do, imports the protobuf messages itself.

What a page may import from below the UI, name by name (a widget's range, a result's type to check with isinstance);
anything that computes is a specviz.ui function that hands the page a value to draw. A page imports a ui name from
the module that defines it: no ui module re-exports core or experiments names (no `__all__` shims).
  specviz.config                 EMBEDDED_TARGET
  specviz.core.limits            MAX_DRAFT_TOKENS, SEED_UI_MAX
  specviz.core.tree              MAX_TREE_WIDTH
  specviz.core.theory            VerifyCurve
  specviz.core.toy               POSTERIOR_ALPHA, POSTERIOR_THRESHOLD, TOY_VARIANTS
  specviz.experiments.bench      SweepSpec
  specviz.experiments.cost_profile  CostProfile
  specviz.experiments.lab        LAB_DRAFTERS, REAL_MODES, GreedyResult, RealResult
  specviz.experiments.numerics   InvarianceReport

A script imports the package, never another script, and never edits sys.path: the checkout is installed editable
(requirements-dev.txt's `-e .`), so `python scripts/x.py` finds specviz. Tests import specviz.loadtest, not scripts.
The load tools' dev-only dependencies (websockets, selenium) are imported in specviz.loadtest only, so `import
specviz` never needs them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BELOW_UI = {"core", "drafters", "models", "viz", "config", "recording", "runs", "experiments", "workshop", "cli", "main"}
ARROWS: dict[str, set[str]] = {
    "root": set(),
    "core": set(),
    "drafters": {"core"},
    "models": {"core"},
    "viz": {"core"},
    "config": {"core", "drafters"},
    "recording": {"config", "core"},
    "runs": {"config", "core", "drafters", "models"},
    "workshop": {"config", "core", "recording", "runs"},
    "experiments": {"config", "core", "drafters", "models", "runs"},
    "cli": BELOW_UI - {"cli", "main"},
    "main": {"cli"},
    "ui": BELOW_UI - {"main"},
    "pages": {"ui", "viz"},
    "app": {"ui"},
    "loadtest": BELOW_UI - {"main"} | {"ui"},  # a leaf: no other layer names it
    "scripts": BELOW_UI - {"main"} | {"ui", "loadtest"},  # not "scripts": a script is a command, not a module
}
PAGE_MAY_IMPORT: dict[str, set[str]] = {  # the table in the docstring, as the test reads it
    "specviz.config": {"EMBEDDED_TARGET"},
    "specviz.core.limits": {"MAX_DRAFT_TOKENS", "SEED_UI_MAX"},
    "specviz.core.tree": {"MAX_TREE_WIDTH"},
    "specviz.core.theory": {"VerifyCurve"},
    "specviz.core.toy": {"POSTERIOR_ALPHA", "POSTERIOR_THRESHOLD", "TOY_VARIANTS"},
    "specviz.experiments.bench": {"SweepSpec"},
    "specviz.experiments.cost_profile": {"CostProfile"},
    "specviz.experiments.lab": {"LAB_DRAFTERS", "REAL_MODES", "GreedyResult", "RealResult"},
    "specviz.experiments.numerics": {"InvarianceReport"},
}
UI_ARROWS: dict[str, set[str]] = {  # the features inside specviz/ui (the docstring's second table)
    "common": set(),
    "step_through": {"common"},
    "room": {"step_through", "common"},
    "labs": {"room", "step_through", "common"},
}
ST_INTERNALS = "specviz.ui.common.st_internals"
INTERNAL_PACKAGES = ("runtime", "proto", "web")  # streamlit.<these>: not Streamlit's public API
STREAMLIT_OK = {"ui", "pages", "app", "loadtest"}  # loadtest: the protocol client speaks Streamlit's protobuf messages
TRANSFORMERS_OK = {"models"}
DEV_ONLY = {"websockets", "selenium"}  # requirements-dev.txt; psutil too, which the UI imports guarded (memory, if known)
DEV_ONLY_OK = {"loadtest"}
PATH_EDIT = re.compile(r"sys\.path\.(insert|append)\(")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """specviz.core.tree -> core; specviz.experiments.bench -> experiments; specviz.__main__ -> main; pages.x -> pages;
    app -> app; scripts.load_test -> scripts."""
    parts = module.split(".")
    if parts[0] != "specviz":
        return parts[0]
    if len(parts) == 1:
        return "root"
    return "main" if parts[1] == "__main__" else parts[1]


def imports_of(path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(specviz modules and scripts imported anywhere in the file, top-level third-party packages imported). A script
    runs with scripts/ first on sys.path, so its bare `import step_latency` is scripts.step_latency."""
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
            if path.parent.name == "scripts" and f"scripts.{name}" in known:
                name = f"scripts.{name}"
            ours = name.split(".")[0] in ("specviz", "scripts")
            (inner if ours else outer).add(name if ours else name.split(".")[0])
    return {n for n in inner if n in known}, outer


@pytest.fixture(scope="module")
def graph() -> dict[str, tuple[set[str], set[str]]]:
    files = [*sorted((REPO / "specviz").rglob("*.py")), *sorted((REPO / "pages").glob("*.py")), REPO / "app.py", *sorted((REPO / "scripts").glob("*.py"))]
    known = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, known) for p in files}


def arrow_violations(graph: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    """Edges against ARROWS. A page's edge to a module in PAGE_MAY_IMPORT passes here; page_import_violations checks
    the names it takes."""
    wrong = []
    for module, (inner, _) in graph.items():
        allowed = ARROWS.get(layer(module))
        if allowed is None:
            wrong.append(f"{module}: no layer in ARROWS (add it to tests/test_boundaries.py)")
            continue
        own = set() if layer(module) == "scripts" else {layer(module)}
        exempt = set(PAGE_MAY_IMPORT) if layer(module) == "pages" else set()
        wrong += [f"{module} -> {other}" for other in inner if layer(other) not in allowed | own | {"root"} and other not in exempt]
    return sorted(wrong)


def feature(module: str) -> str | None:
    """specviz.ui.room.fork -> room; specviz.ui (the package docstring) -> None; outside the ui -> None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["specviz", "ui"] and len(parts) > 2 else None


def ui_arrow_violations(graph: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    """Edges inside specviz/ui against UI_ARROWS (labs -> room -> step_through -> common)."""
    wrong = []
    for module, (inner, _) in graph.items():
        mine = feature(module)
        if mine is None:
            continue
        allowed = UI_ARROWS.get(mine)
        if allowed is None:
            wrong.append(f"{module}: no feature in UI_ARROWS (add it to tests/test_boundaries.py)")
            continue
        wrong += [f"{module} -> {other}" for other in inner if (theirs := feature(other)) is not None and theirs not in allowed | {mine}]
    return sorted(wrong)


def ui_arrows(graph: dict[str, tuple[set[str], set[str]]]) -> set[tuple[str, str]]:
    """The feature-to-feature arrows the ui's imports draw (room -> step_through, ...)."""
    return {(feature(m), feature(o)) for m, (inner, _) in graph.items() for o in inner if feature(m) and feature(o) and feature(m) != feature(o)}


def streamlit_internals_of(path: Path) -> set[str]:
    """The streamlit.runtime / .proto / .web modules a file imports anywhere (`from streamlit import runtime` too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "streamlit" else [node.module]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == "streamlit" and len(n.split(".")) > 1 and n.split(".")[1] in INTERNAL_PACKAGES}
    return found


def defined_names(path: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), not the ones it imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def page_import_violations(path: Path, root: Path = REPO) -> list[str]:
    """`file: module.name` for each name a page takes from below the UI that PAGE_MAY_IMPORT does not list (a bare
    `import specviz.core.x` counts as every name), and for each name it takes from a ui module that does not define
    it (a re-export)."""
    wrong = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wrong += [f"{path.name}: {a.name}" for a in node.names if a.name in PAGE_MAY_IMPORT]
        if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
            continue
        if node.module in PAGE_MAY_IMPORT:
            wrong += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name not in PAGE_MAY_IMPORT[node.module]]
        elif node.module.startswith("specviz.ui"):
            base = root / node.module.replace(".", "/")
            source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            defined = defined_names(source)
            wrong += [f"{path.name}: {node.module}.{a.name} (not defined there)" for a in node.names if a.name not in defined and not (base / f"{a.name}.py").exists()]
    return wrong


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


def test_ui_features_import_down_only(graph):
    """labs -> room -> step_through -> common, each -> common: nothing the other way (a stage is handed the room's hooks)."""
    wrong = ui_arrow_violations(graph)
    assert not wrong, "ui imports against UI_ARROWS:\n" + "\n".join(wrong)
    assert ui_arrows(graph) <= {(f, to) for f, tos in UI_ARROWS.items() for to in tos}
    assert ("room", "step_through") in ui_arrows(graph)  # the walk sees the features at all


def test_known_bad_ui_graphs_fail():
    """The feature rule catches the old shape (step_through's controls importing the room's save, the room importing
    step_through back: a cycle by features), common reaching up, and a feature the table does not name."""
    old = {
        "specviz.ui.step_through.controls": ({"specviz.ui.room.saved_runs", "specviz.ui.common.widgets"}, set()),
        "specviz.ui.room.saved_runs": ({"specviz.ui.step_through.session"}, set()),
        "specviz.ui.step_through.session": (set(), set()),
        "specviz.ui.common.widgets": ({"specviz.ui.labs.race"}, set()),
        "specviz.ui.labs.race": ({"specviz.ui.room.saved_runs", "specviz.ui.step_through.session"}, set()),
        "specviz.ui.extras.x": ({"specviz.ui.common.widgets"}, set()),
        "specviz.ui": (set(), set()),
    }
    assert ui_arrow_violations(old) == [
        "specviz.ui.common.widgets -> specviz.ui.labs.race",
        "specviz.ui.extras.x: no feature in UI_ARROWS (add it to tests/test_boundaries.py)",
        "specviz.ui.step_through.controls -> specviz.ui.room.saved_runs",
    ]


def test_streamlit_internals_only_through_the_adapter():
    """Only specviz/ui/common/st_internals.py imports streamlit.runtime, .proto or .web (the ui, the pages, app.py)."""
    paths = [*sorted((REPO / "specviz" / "ui").rglob("*.py")), *sorted((REPO / "pages").glob("*.py")), REPO / "app.py"]
    wrong = [f"{module_name(p)}: {sorted(found)}" for p in paths if module_name(p) != ST_INTERNALS and (found := streamlit_internals_of(p))]
    assert not wrong, "Streamlit internals imported past specviz.ui.common.st_internals:\n" + "\n".join(wrong)
    assert streamlit_internals_of(REPO / "specviz" / "ui" / "common" / "st_internals.py")  # the adapter is seen


def test_known_bad_streamlit_internals_are_found(tmp_path):
    """Each way of reaching an internal is seen (inside a function too); the public API and streamlit.logger are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import streamlit as st\nfrom streamlit import runtime, config\nfrom streamlit.logger import get_logger\n"
        "def f():\n    from streamlit.proto.BackMsg_pb2 import BackMsg\n    import streamlit.web.cli\n"
        "    from streamlit.runtime.scriptrunner import get_script_run_ctx\n",
        encoding="utf-8",
    )
    assert streamlit_internals_of(probe) == {"streamlit.runtime", "streamlit.proto.BackMsg_pb2", "streamlit.web.cli", "streamlit.runtime.scriptrunner"}


def test_no_import_cycles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def path_edits(paths: list[Path], root: Path = REPO) -> list[str]:
    """`file:line` of every sys.path.insert/append (in code or in a string a script hands to `python -c`)."""
    return [f"{p.relative_to(root)}:{n}" for p in paths for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if PATH_EDIT.search(line)]


def scripts_imported_by(paths: list[Path], root: Path = REPO) -> list[str]:
    """`file: module` for every import of a script (scripts.x) in these files."""
    found = []
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{p.relative_to(root)}: {n}" for n in names if n.split(".")[0] == "scripts"]
    return found


def test_no_sys_path_edits():
    paths = [*sorted((REPO / "scripts").glob("*.py")), *sorted((REPO / "specviz").rglob("*.py")), *sorted((REPO / "pages").glob("*.py")), REPO / "app.py"]
    edits = path_edits(paths)
    assert not edits, "sys.path edited (install the checkout instead: pip install -e ., requirements-dev.txt):\n" + "\n".join(edits)


def test_tests_import_the_package_not_scripts():
    found = scripts_imported_by(sorted((REPO / "tests").rglob("*.py")))
    assert not found, "tests import scripts (move what they share into specviz.loadtest):\n" + "\n".join(found)


def test_importing_specviz_needs_no_dev_only_dependency():
    code = "import sys, specviz, specviz.loadtest, specviz.config; print(sorted({'websockets', 'selenium', 'psutil'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_streamlit_and_transformers_stay_in_their_rooms(graph):
    for module, (_, outer) in graph.items():
        if layer(module) == "scripts":  # command lines: a script may time transformers' own generate
            continue
        if outer & DEV_ONLY:
            assert layer(module) in DEV_ONLY_OK, f"{module} imports {sorted(outer & DEV_ONLY)}; only specviz.loadtest may (dev-only)"
        if "streamlit" in outer:
            assert layer(module) in STREAMLIT_OK, f"{module} imports streamlit; only specviz.ui, pages and app.py may"
        if "transformers" in outer:
            assert layer(module) in TRANSFORMERS_OK, f"{module} imports transformers; only specviz.models may"


def test_pages_import_only_ui_and_viz(graph):
    for module, (inner, _) in graph.items():
        if layer(module) == "pages":
            below = {o for o in inner if layer(o) not in {"ui", "viz"}}
            assert below <= set(PAGE_MAY_IMPORT), f"{module} imports {sorted(below - set(PAGE_MAY_IMPORT))}"


def test_pages_take_only_the_listed_constants_and_types():
    wrong = [w for p in sorted((REPO / "pages").glob("*.py")) for w in page_import_violations(p)]
    assert not wrong, "pages import past the ui (list the constant or type in PAGE_MAY_IMPORT, or let a ui function hand the value):\n" + "\n".join(wrong)


def test_no_ui_module_re_exports_with_all():
    shims = [str(p.relative_to(REPO)) for p in sorted((REPO / "specviz" / "ui").rglob("*.py")) if "__all__" in defined_names(p)]
    assert not shims, f"ui modules with __all__ re-export shims: {shims}"


def test_known_bad_graphs_fail(tmp_path):
    """The checks catch what they claim to: an import inside a function is seen, core importing the UI breaks an
    arrow, a page importing core (a module PAGE_MAY_IMPORT does not list) breaks an arrow, and two modules importing each other are a cycle."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from specviz.ui.step_through.session import Run\n", encoding="utf-8")
    inner, _ = imports_of(probe, {"specviz.ui.step_through.session"})
    assert inner == {"specviz.ui.step_through.session"}
    bad = {"specviz.core.decoding": (inner, set()), "specviz.ui.step_through.session": (set(), set()), "pages.x": ({"specviz.core.sampling"}, set())}
    assert arrow_violations(bad) == ["pages.x -> specviz.core.sampling", "specviz.core.decoding -> specviz.ui.step_through.session"]
    cyclic = {"specviz.ui.a": ({"specviz.ui.b"}, set()), "specviz.ui.b": ({"specviz.ui.a"}, set())}
    assert find_cycle(cyclic) == ["specviz.ui.a", "specviz.ui.b", "specviz.ui.a"]


def test_known_bad_page_imports_fail(tmp_path):
    """The page rule catches what it claims to: a computing function from core (run_toy), a bare import of a listed
    module, and a core name taken through a ui module that only imports it (the old `__all__` shim) all fail; a
    listed constant, and a name the ui module defines, pass."""
    ui = tmp_path / "specviz" / "ui" / "labs"
    ui.mkdir(parents=True)
    (ui / "exactness.py").write_text("from specviz.core.toy import run_toy\n\ndef run_real():\n    pass\n", encoding="utf-8")
    page = tmp_path / "page.py"
    page.write_text(
        "from specviz.core.toy import TOY_VARIANTS, run_toy\nimport specviz.core.toy\nfrom specviz.ui.labs.exactness import run_real, run_toy\n",
        encoding="utf-8",
    )
    assert page_import_violations(page, tmp_path) == [
        "page.py: specviz.core.toy.run_toy",
        "page.py: specviz.core.toy",
        "page.py: specviz.ui.labs.exactness.run_toy (not defined there)",
    ]
    bad = {"pages.x": ({"specviz.core.toy", "specviz.core.limits"}, set()), "specviz.core.toy": (set(), set()), "specviz.core.limits": (set(), set())}
    assert arrow_violations(bad) == []  # both listed modules: the names are page_import_violations' to check
    bad["pages.x"] = ({"specviz.core.sampling"}, set())
    assert arrow_violations(bad) == ["pages.x -> specviz.core.sampling"]


def test_known_bad_scripts_fail(tmp_path):
    """The scripts' rules catch what they claim to, on the shape the old scripts/ had: room_load_test <-> room_presenter
    held apart by a function-level import is a cycle (and a script importing a script breaks an arrow), a bare
    `import step_latency` in a script is that script, specviz importing the leaf specviz.loadtest breaks an arrow,
    sys.path.insert is found (also inside a string), and a test importing a script is found."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "room_presenter.py").write_text("def follow():\n    from scripts.room_load_test import pin_replica\n", encoding="utf-8")
    (scripts / "speedup_check.py").write_text("import step_latency\n", encoding="utf-8")
    known = {"scripts.room_presenter", "scripts.room_load_test", "scripts.step_latency", "specviz.loadtest.room"}
    assert imports_of(scripts / "room_presenter.py", known)[0] == {"scripts.room_load_test"}
    assert imports_of(scripts / "speedup_check.py", known)[0] == {"scripts.step_latency"}
    bad = {
        "scripts.room_load_test": ({"scripts.room_presenter"}, set()),
        "scripts.room_presenter": ({"scripts.room_load_test"}, set()),
        "specviz.core.tree": ({"specviz.loadtest.room"}, set()),
        "specviz.loadtest.room": (set(), set()),
    }
    assert find_cycle(bad) == ["scripts.room_load_test", "scripts.room_presenter", "scripts.room_load_test"]
    assert arrow_violations(bad) == [
        "scripts.room_load_test -> scripts.room_presenter",
        "scripts.room_presenter -> scripts.room_load_test",
        "specviz.core.tree -> specviz.loadtest.room",
    ]
    probe = scripts / "precision_rss.py"
    probe.write_text('import sys\nCHILD = "import sys; sys.path.insert(0, {root!r})"\nsys.path.append("..")\n', encoding="utf-8")
    assert path_edits([probe], tmp_path) == ["scripts/precision_rss.py:2", "scripts/precision_rss.py:3"]
    test = tmp_path / "test_x.py"
    test.write_text("from scripts import room_attacks as ra\nimport scripts.load_test\nfrom specviz.loadtest import attacks\n", encoding="utf-8")
    assert scripts_imported_by([test], tmp_path) == ["test_x.py: scripts", "test_x.py: scripts.load_test"]


def test_the_embedded_target_has_one_name():
    from specviz.config import EMBEDDED_TARGET
    from specviz.models import EMBEDDED_TARGET as MODELS_EMBEDDED

    assert EMBEDDED_TARGET == MODELS_EMBEDDED
