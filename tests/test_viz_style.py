"""Every figure specviz builds carries the lean template (specviz.viz.style): plotly's look for 2-D charts, without
the defaults for trace types specviz never draws, which every participant's page serialised for every chart."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from specviz.viz.style import TEMPLATE, lean_template

VIZ = Path(__file__).resolve().parents[1] / "specviz" / "viz"


def test_the_lean_template_keeps_plotlys_look_and_drops_the_rest():
    full = pio.templates["plotly"].to_plotly_json()
    for key in ("colorway", "font", "xaxis", "yaxis", "plot_bgcolor", "paper_bgcolor", "hovermode"):
        assert TEMPLATE["layout"][key] == full["layout"][key]
    assert TEMPLATE["data"]["bar"] == full["data"]["bar"] and "surface" not in TEMPLATE["data"]
    lean = go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout=dict(template=TEMPLATE))
    plain = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    assert len(pio.to_json(lean)) < 0.5 * len(pio.to_json(plain))
    assert lean_template() == TEMPLATE  # built from plotly's own, not a copy that drifts


def test_every_figure_builder_in_viz_sets_the_template():
    """A function that makes a figure (go.Figure / make_subplots) names TEMPLATE, or builds through figures._figure
    (whose LAYOUT carries it)."""
    missing = []
    for path in sorted(VIZ.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            source = ast.get_source_segment(path.read_text(encoding="utf-8"), fn) or ""
            makes = "go.Figure(" in source or "make_subplots(" in source
            if makes and "TEMPLATE" not in source and "**LAYOUT" not in source:
                missing.append(f"{path.name}:{fn.name}")
    assert not missing, missing
    assert json.loads(json.dumps(TEMPLATE)) == TEMPLATE  # plain JSON
