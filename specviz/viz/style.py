"""The one plotly template every specviz figure carries: plotly's own look, cut to what 2-D charts read.

A figure carries its template in its JSON. Plotly's default template is about 7 kB, mostly defaults for trace
types specviz never draws (3-D, polar, geo, ternary, colour bars); each figure carried it to the browser, and each
participant's page serialised, hashed and sent it again for every chart on every redraw. This template keeps the
default template's layout for cartesian axes and its bar, scatter and heatmap defaults, so the charts look the
same; a figure's JSON is about 2.5 kB smaller and to_dict + to_json about 3x cheaper (docs/performance.md).
Streamlit's theme is applied on top of it in the browser, as it is on top of plotly's.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

KEEP_LAYOUT = (
    "autotypenumbers", "colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor", "plot_bgcolor", "xaxis", "yaxis",
    "shapedefaults", "annotationdefaults", "title",
)  # fmt: skip
KEEP_TRACES = ("bar", "scatter", "heatmap")


def lean_template(base: str = "plotly") -> dict:
    """Plotly's ``base`` template as plain JSON, with only the layout keys and trace defaults 2-D charts use."""
    full = pio.templates[base].to_plotly_json()
    layout = {k: v for k, v in full.get("layout", {}).items() if k in KEEP_LAYOUT}
    data = {k: v for k, v in full.get("data", {}).items() if k in KEEP_TRACES}
    return {"layout": layout, "data": data}


TEMPLATE = lean_template()  # a plain dict, read only: plotly copies it into each figure


class FrozenFigure(go.Figure):
    """A finished figure that many pages draw (specviz.ui.common.memo keeps it on a session, and followers share one
    session): Streamlit calls to_dict() each time it draws a chart, and plotly's to_dict copies the whole figure and
    encodes its arrays again, about a third of a follower's redraw (docs/performance.md). Made by freeze(), which
    computes it once. Read only: a change made after freeze() would not be drawn."""

    def to_dict(self) -> dict:
        return self._frozen_dict


def freeze(fig: go.Figure) -> go.Figure:
    """fig, finished: its to_dict() computed now and returned from then on (the same dict, never to be changed)."""
    frozen = fig.to_dict()
    fig.__class__ = FrozenFigure
    fig._frozen_dict = frozen  # plotly lets a figure carry attributes whose names start with "_"
    return fig
