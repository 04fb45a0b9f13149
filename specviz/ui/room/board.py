"""The room board, the page's side: every fork's latest point (α, speedup) for the presenter, and for the room once
the presenter shows it (specviz.workshop.presentation keeps the points; specviz.ui.room.fork adds them). While the
room's store is unreachable it shows the points it last read, and says so."""

from __future__ import annotations

import logging
from collections.abc import Callable

import streamlit as st

from specviz.drafters.specs import short_name
from specviz.ui.common import widgets
from specviz.ui.room.lesson import board_counts
from specviz.ui.room.present import is_presenter, steps_in_flight, store
from specviz.viz.board import board_figure, board_frame, board_table
from specviz.workshop.presentation import BoardPoint, Presentation, PresentationStore
from specviz.workshop.store import StoreUnavailable

log = logging.getLogger(__name__)

BOARD_EVERY_S = 2.0
BOARD_CACHE_KEY = "specviz_board_points"  # (presentation id, the board's stamp, its points, waited): board_cache


def board_section(p: Presentation | None) -> None:
    """The room board, for the presenter, and for everyone once the presenter shows it; redrawn every BOARD_EVERY_S."""
    if p is None or not (is_presenter(p) or p.show_board):
        return
    st.fragment(_board, run_every=BOARD_EVERY_S)(p.id)


def _board_points(room: PresentationStore, presentation_id: str) -> list[BoardPoint]:
    """The board's points, read again only when it changed (see board_cache). Raises StoreUnavailable."""
    stamp = room.board_stamp(presentation_id)
    cache = board_cache(st.session_state.get(BOARD_CACHE_KEY), presentation_id, stamp, lambda: room.points(presentation_id))
    st.session_state[BOARD_CACHE_KEY] = cache
    return cache[2]


def board_cache(cached: tuple | None, presentation_id: str, stamp: tuple | None, load: Callable[[], list[BoardPoint]], in_flight: Callable[[], int] = steps_in_flight) -> tuple:
    """(presentation id, the board's stamp, its points, whether it waited): the cached points while the board is
    unchanged, or for one refresh while a participant's Step is in flight in this process (the aggregation lets the
    Step go first; long jobs and baselines do not hold it up); else load() afresh."""
    if cached is not None and cached[0] == presentation_id:
        if cached[1] == stamp:
            return cached
        if in_flight() and not cached[3]:
            return (*cached[:3], True)
    return (presentation_id, stamp, load(), False)


def _board(presentation_id: str) -> None:
    room = store()
    if room is None:
        return
    st.subheader("The room board")
    board_counts(presentation_id)  # the lesson's tasks: how many finished each (docs/lesson-45min.md)
    try:
        points = _board_points(room, presentation_id)
    except StoreUnavailable:
        cached = st.session_state.get(BOARD_CACHE_KEY)
        points = cached[2] if cached is not None and cached[0] == presentation_id else []
        st.warning("The room's store is unreachable: the board shows the points it last read, and moves on when the store is back.", icon="🎓")
    if not points:
        st.info("No forks yet: when participants press **Try it yourself from here** and Step, their results land here (anonymously).")
        return
    df = board_frame(points, short_name)
    color = widgets.radio("colour by", ["temperature", "drafter"], horizontal=True, key="board_color")
    st.plotly_chart(board_figure(df, "band" if color == "temperature" else "drafter_name"), width="stretch", key="board_chart")
    st.caption(
        f"{len(df)} fork(s) since the presentation started, one marker each at its α and measured speedup (hollow: plain "
        "decoding is still being measured, so the marker sits at its tokens per pass). Dotted: the ceiling for each k, the "
        "tokens per target pass α implies with a free drafter; a real drafter costs time, so the markers sit below it."
    )
    st.dataframe(board_table(df), hide_index=True)
