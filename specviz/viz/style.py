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


# The one palette. Okabe & Ito's eight colours ("Color Universal Design", 2008), chosen so that people with any of
# the common colour-vision deficiencies can tell them apart; every chart and the token stream take their colours
# from here, and a colour means one thing everywhere. tests/test_palette.py checks the fates under simulated
# protanopia, deuteranopia and tritanopia (Machado et al. 2009) and every text colour's contrast (WCAG 2).
OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}  # fmt: skip
INK = "#1A1A1A"  # text and outlines on light fills
PAPER = "#FFFFFF"  # the token stream's own background, in either theme, so its contrast is known
MUTED_INK = "#595959"  # the prompt's text: quieter than the generated text, 7:1 on PAPER
GREY = "#888888"  # a reference: the plain-decoding baseline, break-even lines, "typical" noise
LIGHT_GREY = "#C8C8C8"  # lines that stay in the background
REJECT_INK = "#A8400A"  # a thrown-away draft's text: vermillion darkened until it reads on PAPER

# What each colour means, everywhere. A kept token's fill is the colour of where it came from: green the drafter's
# guess kept, orange the residual it was resampled from, sky blue the bonus drawn from p_target.
ACCEPTED = OKABE_ITO["bluish_green"]
RESAMPLED = RESIDUAL = OKABE_ITO["orange"]
BONUS = OKABE_ITO["sky_blue"]
TARGET_STEP = LIGHT_GREY
REJECTED = OKABE_ITO["vermillion"]
P_TARGET = OKABE_ITO["blue"]
Q_DRAFT = OKABE_ITO["reddish_purple"]
HIGHLIGHT = OKABE_ITO["yellow"]  # the best choice on a chart (best k), drawn with a dark outline
THEME_INK = {"light": "#262730", "dark": "#FAFAFA"}  # Streamlit's own text colours, for HTML drawn in an iframe
HAIRLINE = "rgba(128,128,128,.5)"  # borders that read on either theme
FLASH = {"plain": "rgba(136,136,136,.55)", "speculative": "rgba(0,114,178,.45)"}  # a new token's flash: GREY, P_TARGET's blue
COLOUR_NAMES = {P_TARGET: "blue", Q_DRAFT: "pink", RESIDUAL: "orange", ACCEPTED: "green", REJECTED: "red", BONUS: "light blue"}  # for captions
SERIES = [OKABE_ITO[c] for c in ("blue", "orange", "bluish_green", "reddish_purple", "sky_blue", "vermillion", "yellow")]


FOCUS = OKABE_ITO["blue"]  # the keyboard focus ring: 5:1 on a light page, drawn outside the control it marks
PAGE_CSS = f"""
:focus-visible {{ outline: 3px solid {FOCUS} !important; outline-offset: 2px !important; }}
.stButton button:focus-visible, .stDownloadButton button:focus-visible {{ box-shadow: 0 0 0 2px {PAPER}, 0 0 0 5px {FOCUS} !important; }}
.specviz-tok {{ position: relative; cursor: help; }}
.specviz-tok:focus {{ outline: 3px solid {FOCUS}; outline-offset: 1px; z-index: 2; }}
.specviz-tok:focus::after {{
  content: attr(title); position: absolute; left: 0; top: calc(100% + 4px); z-index: 10; width: max-content; max-width: min(22rem, 80vw);
  white-space: pre-line; background: {INK}; color: {PAPER}; font-size: .78rem; line-height: 1.35; padding: .35rem .5rem; border-radius: 4px;
  text-decoration: none; font-weight: 400;
}}
"""  # the focus ring everywhere, and a focused (tapped or tabbed-to) token shows its details under it: no hover needed
