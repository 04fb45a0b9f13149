"""The race's charts and its player (specviz/viz/race.py, specviz/viz/playback.py): the histogram marks the threshold and
puts zero gaps in the first bin; the player carries hostile token text as data only, never as markup."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from specviz.core.race import RaceResult, lane_of
from specviz.viz.playback import playback_data, playback_html, script_json
from specviz.viz.race import burst_size_figure, gap_histogram, gap_series, lane_frame

HOSTILE = "</script><script>alert(1)</script>\u2028<img src=x onerror=alert(2)>&amp;"


def race() -> RaceResult:
    plain = lane_of("plain <b>decoding</b>", [0.1, 0.2, 0.3, 0.4], [[5], [6], [7], [8]], 0.05)
    spec = lane_of("prompt lookup, k=4", [0.1, 0.2], [[5], [6, 7, 8]], 0.05)
    return RaceResult("p", (1,), "t", "float32", "lookup", "prompt lookup, k=4", 4, 0.0, 0, 4, plain, spec, {5: "a", 6: HOSTILE, 7: "c", 8: "d"})


def test_the_player_carries_hostile_text_as_data():
    html = playback_html(race())
    payload = re.search(r'<script type="application/json" id="race-data">(.*?)</script>', html, re.S).group(1)
    assert "<" not in payload and ">" not in payload and "&" not in payload and "\u2028" not in payload
    data = json.loads(payload)
    assert data == json.loads(json.dumps(playback_data(race())))
    assert HOSTILE in data["lanes"][1]["rounds"][1]["text"] and data["lanes"][0]["label"] == "plain <b>decoding</b>"
    assert html.count("<script") == 2  # the data element and the player: nothing the text brought
    assert "innerHTML" not in html  # text goes in with textContent only
    assert script_json("</script>") == '"\\u003c/script\\u003e"'


def test_the_player_plays_each_round_at_its_commit_time():
    data = playback_data(race())
    spec = data["lanes"][1]
    assert [r["t"] for r in spec["rounds"]] == [0.1, 0.2] and [r["n"] for r in spec["rounds"]] == [1, 3]
    assert data["end_s"] == 0.4 and spec["measured_s"] == 0.2


def test_the_gap_histogram_marks_the_threshold_and_the_zero_gaps():
    fig = gap_histogram(gap_series(race()), 0.001)
    plain, spec = fig.data
    assert plain.name == "plain &lt;b&gt;decoding&lt;/b&gt;"  # trace names are escaped (plotly reads some HTML)
    assert sum(spec.y) == 3 and spec.y[0] == 2  # two zero gaps inside the round of three, in the first bin (1 µs)
    assert fig.layout.shapes[0].x0 == np.log10(0.001) and "burst threshold 1 ms" in fig.layout.annotations[0].text
    assert sum(burst_size_figure([1, 3, 3]).data[0].y) == 3


def test_the_lane_table_has_one_row_per_lane():
    frame = lane_frame(race())
    assert list(frame["tokens"]) == [4, 4] and list(frame["tokens per target pass"]) == [1.0, 2.0]
    assert frame["gaps < 1 ms"].iloc[1] == 2 / 3


def test_the_player_takes_its_colours_from_the_palette_and_leaves_the_data_alone():
    from specviz.viz import style

    r = race()
    html = playback_html(dataclasses.replace(r, token_text={**r.token_text, 7: "__SPEC__ __CURSOR__"}))
    style_part = html.split("</style>")[0]
    assert not re.search(r"__[A-Z_]+__", style_part) and style.SERIES[0] in style_part and style.REJECTED in style_part
    assert "__SPEC__ __CURSOR__" in html  # a token's text is data: the palette is filled in before it goes in
