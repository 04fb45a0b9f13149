"""The fates anyone can tell apart (issue 43): the token stream's kept fates stay apart under simulated colour
blindness and on a projector, each fate has a cue that is not colour, every text in the stream reads at WCAG AA
(4.5:1), tokens are focusable and named, and no chart picks a colour outside specviz.viz.style's palette.

Simulation: Machado, Oliveira & Fernandes (2009), severity 1.0, applied in linear sRGB (as colorspacious does);
distance: CIEDE2000 in CIELAB (D65). Contrast: WCAG 2 relative luminance. The palette before this issue (translucent
fills over white) gave ΔE00 8.5 / 8.4 / 4.9 at worst and fills 1.20–1.52:1 against the page; its known-bad control
below must fail the same thresholds."""

from __future__ import annotations

import itertools
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from specviz.viz import style
from specviz.viz.tokens import BOX_STYLE, COMMITTED, FATES, MARK_STYLE, PROMPT_STYLE, legend_html, token_stream_html

REPO = Path(__file__).resolve().parents[1]
MACHADO = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}
MIN_DELTA_E = 10.0  # kept fates' fills, every pair, every simulation (the old palette: 8.5, 8.4, 4.9)
MIN_FILL_CONTRAST = 1.6  # a kept fate's fill against the page (the old palette: 1.20-1.52, gone on a projector)
MIN_TEXT_CONTRAST = 4.5  # WCAG AA for body text
OLD_FILLS = {  # the palette before issue 43: the known-bad control
    "accepted": "rgba(46,160,67,.30)", "resampled": "rgba(230,140,20,.40)", "bonus": "rgba(40,120,220,.32)", "target": "rgba(128,128,128,.16)",
}  # fmt: skip
Rgb = tuple[float, float, float]


def parse_color(text: str, under: Rgb = (1.0, 1.0, 1.0)) -> Rgb:
    """#RRGGBB, #RGB or rgba(r,g,b,a) as sRGB in 0..1, a translucent colour composited over `under`."""
    text = text.strip()
    if text.startswith("#"):
        h = text[1:] if len(text) == 7 else "".join(c * 2 for c in text[1:])
        return tuple(int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))
    parts = [float(x) for x in re.findall(r"[\d.]+", text)]
    alpha = parts[3] if len(parts) == 4 else 1.0
    return tuple(alpha * c / 255 + (1 - alpha) * u for c, u in zip(parts[:3], under))


def _lin(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _delin(c: float) -> float:
    c = min(1.0, max(0.0, c))
    return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055


def luminance(rgb: Rgb) -> float:
    r, g, b = (_lin(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: Rgb, b: Rgb) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def simulate(rgb: Rgb, kind: str) -> Rgb:
    m, lin = MACHADO[kind], [_lin(c) for c in rgb]
    return tuple(_delin(sum(m[i][j] * lin[j] for j in range(3))) for i in range(3))


def lab(rgb: Rgb) -> tuple[float, float, float]:
    r, g, b = (_lin(c) for c in rgb)
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29  # noqa: E731
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e00(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """CIEDE2000 (Sharma, Wu & Dalal 2005), kL = kC = kH = 1."""
    (L1, a1, b1), (L2, a2, b2) = lab1, lab2
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar**7 / (c_bar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p, h2p = math.degrees(math.atan2(b1, a1p)) % 360, math.degrees(math.atan2(b2, a2p)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p + 180) % 360 - 180
    d_hp = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (L1 + L2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    else:
        h_bar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = 1 - 0.17 * math.cos(math.radians(h_bar - 30)) + 0.24 * math.cos(math.radians(2 * h_bar)) + 0.32 * math.cos(math.radians(3 * h_bar + 6)) - 0.20 * math.cos(math.radians(4 * h_bar - 63))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_bar, 1 + 0.015 * cp_bar * t
    r_t = -math.sin(math.radians(60 * math.exp(-(((h_bar - 275) / 25) ** 2)))) * 2 * math.sqrt(cp_bar**7 / (cp_bar**7 + 25**7))
    dl, dc, dhh = (L2 - L1) / s_l, (c2p - c1p) / s_c, d_hp / s_h
    return math.sqrt(dl**2 + dc**2 + dhh**2 + r_t * dc * dhh)


def declared(style_text: str, prop: str) -> str | None:
    """The value of one CSS property in an inline style, or None."""
    m = re.search(rf"(?:^|;)\s*{re.escape(prop)}\s*:\s*([^;]+)", style_text)
    return m.group(1).strip() if m else None


def paper() -> Rgb:
    return parse_color(declared(BOX_STYLE, "background"))


def fills(styles: dict[str, str]) -> dict[str, Rgb]:
    return {k: parse_color(declared(s, "background") or declared(s, "background-color"), paper()) for k, s in styles.items()}


def worst_delta_e(colors: dict[str, Rgb]) -> dict[str, tuple[float, str, str]]:
    """Per simulation, the closest pair of colours: (ΔE00, a, b)."""
    return {
        kind: min((delta_e00(lab(simulate(colors[a], kind)), lab(simulate(colors[b], kind))), a, b) for a, b in itertools.combinations(colors, 2))
        for kind in MACHADO
    }  # fmt: skip


def test_colour_maths_matches_published_values():
    assert delta_e00((50, 2.6772, -79.7751), (50, 0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)  # Sharma et al. pair 1
    assert delta_e00((50, 2.5, 0), (73, 25, -18)) == pytest.approx(27.1492, abs=1e-4)  # pair 31
    assert contrast((0, 0, 0), (1, 1, 1)) == pytest.approx(21.0)
    assert contrast(parse_color("#767676"), (1, 1, 1)) == pytest.approx(4.54, abs=0.01)  # the AA grey
    assert simulate((1.0, 1.0, 1.0), "protanopia") == pytest.approx((1.0, 1.0, 1.0), abs=2e-3)  # white stays white


def test_kept_fates_stay_apart_under_every_colour_vision_simulation():
    worst = worst_delta_e(fills({k: FATES[k][-1] for k in COMMITTED}))
    assert all(de >= MIN_DELTA_E for de, _, _ in worst.values()), worst
    old = worst_delta_e({k: parse_color(v) for k, v in OLD_FILLS.items()})  # the known-bad control
    assert min(de for de, _, _ in old.values()) < MIN_DELTA_E and round(old["tritanopia"][0], 1) == 4.9


def test_kept_fills_survive_a_projector():
    page = paper()
    assert all(contrast(rgb, page) >= MIN_FILL_CONTRAST for rgb in fills({k: FATES[k][-1] for k in COMMITTED}).values())
    assert max(contrast(parse_color(v), page) for v in OLD_FILLS.values()) < MIN_FILL_CONTRAST


def test_every_text_in_the_stream_reads_at_aa():
    """Each fate's text on its fill (or on the stream's paper), the prompt's text, in either theme: the stream
    sets its own background and text colour."""
    page, ink = paper(), parse_color(declared(BOX_STYLE, "color"))
    pairs = {"generated text": (ink, page), "prompt": (parse_color(declared(PROMPT_STYLE, "color")), page)}
    for kind, (*_, css) in FATES.items():
        bg = declared(css, "background")
        pairs[kind] = (parse_color(declared(css, "color") or declared(BOX_STYLE, "color")), parse_color(bg) if bg else page)
    ratios = {name: contrast(fg, bg) for name, (fg, bg) in pairs.items()}
    assert all(r >= MIN_TEXT_CONTRAST for r in ratios.values()), ratios
    assert "opacity" not in MARK_STYLE and "opacity" not in "".join(css for *_, css in FATES.values())  # nothing fades text
    old = {"discarded": contrast(parse_color("rgba(210,60,60,.55)"), page), "prompt": contrast(parse_color("rgba(128,128,128,.85)"), page)}
    assert all(r < MIN_TEXT_CONTRAST for r in old.values())  # the known-bad control: 2.33 and 3.07


def _cue(css: str) -> str:
    """What a fate's style says once every colour is taken away."""
    css = re.sub(r"#[0-9A-Fa-f]{3,6}\b|rgba?\([^)]*\)", "", css)
    return ";".join(sorted(d.strip() for d in css.split(";") if d.strip() and not re.match(r"\s*(background|color)\s*:", d)))


def test_every_fate_has_a_cue_beyond_colour():
    cues = {kind: _cue(css) for kind, (*_, css) in FATES.items()}
    assert all(cues.values()) and len(set(cues.values())) == len(cues), cues  # each fate its own, none empty
    assert all("line-through" in cues[k] for k in ("rejected", "discarded"))  # thrown away: struck through
    assert not any("line-through" in cues[k] for k in COMMITTED)
    assert all(FATES[k][2] for k in FATES)  # the cue named, for the legend


class _Spans(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "span":
            self.spans.append(dict(attrs))


def test_generated_tokens_are_focusable_and_named_by_their_fate():
    stream = pd.DataFrame({
        "kind": ["accepted", "rejected", "discarded", "resampled", "bonus", "target"], "text": list("abcdef"), "round": [0, 0, 0, 0, 1, 2],
        "token_id": range(6), "first_in_round": [True, False, False, False, True, True],
    })  # fmt: skip
    parser = _Spans()
    parser.feed(token_stream_html(["the", " prompt"], stream) + legend_html())
    tokens = [s for s in parser.spans if s.get("tabindex") == "0"]
    assert [t["aria-label"].split(" · ")[0] for t in tokens] == [FATES[k][0] for k in stream["kind"]]
    assert all(t["class"] == "specviz-tok" and "\n" not in t["aria-label"] for t in tokens)
    assert sum(1 for s in parser.spans if s.get("title") == "prompt") == 2  # the prompt is not a Tab stop each token
    assert ".specviz-tok:focus::after" in style.PAGE_CSS and "attr(title)" in style.PAGE_CSS  # a tap shows the details


COLOUR_LITERAL = re.compile(r"#[0-9A-Fa-f]{6}\b|#[0-9A-Fa-f]{3}\b|rgba?\(\s*\d|(?<!\[)[\"'](?:black|white|grey|gray|gold|red|green|blue|orange)[\"'](?!\])")


def test_no_colour_is_chosen_outside_the_palette():
    """Charts, the token stream and the pages take colours from specviz.viz.style (a colour keeps its meaning)."""
    files = [*sorted((REPO / "specviz" / "viz").glob("*.py")), *sorted((REPO / "specviz" / "ui").rglob("*.py")), *sorted((REPO / "pages").glob("*.py"))]
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()[:90]}"
        for path in files if path.name != "style.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if COLOUR_LITERAL.search(line.split(" # ")[0])
    ]  # fmt: skip
    assert not found, "\n".join(found)
