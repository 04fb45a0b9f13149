"""Export for slides on the step-through page: the token stream as a standalone HTML file and the per-round table
as CSV (built by specviz.viz.export). Files are built when a button is clicked, from the rounds run by then."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from specviz.ui.step_through.step_views import num_generated
from specviz.viz import stream_frame
from specviz.viz.export import round_table, rounds_csv, stream_document


def _notes(session) -> list[str]:
    config = session.config
    sampling = "greedy (temperature 0)" if config.temperature == 0 else f"temperature {config.temperature:g}, top-k {config.top_k}, top-p {config.top_p:g}"
    runs = "; ".join(f"{run.label}: {len(run.records)} rounds, {num_generated(run)} tokens" for run in session.runs)
    return [
        f"target {config.target} · drafter {config.drafter}, {config.k_words} · {sampling} · seed {config.seed}",
        runs,
        f"made with specviz on {dt.date.today().isoformat()}; hover a token for its p_target, q_draft and u",
    ]


def export_buttons(session, playing: bool = False) -> None:
    """Two download buttons (keys export_html, export_csv) under an "Export for slides" heading; nothing to
    export before the first round or while Play is stepping (the files would miss the rounds still to come)."""
    if session is None or not session.num_rounds or playing:
        return
    # a snapshot now: the buttons' files are built on click, from the rounds that are on the page now
    runs = [(run.label, tuple(run.records)) for run in session.runs]
    baseline = tuple(session.baseline.records)
    prompt_texts = list(session.prompt_texts)
    token_text = session.token_text
    notes = _notes(session)

    def html_file() -> str:
        return stream_document(prompt_texts, {label: stream_frame(records, token_text) for label, records in runs}, notes=notes)

    def csv_file() -> str:
        return rounds_csv([round_table(records, label, token_text, baseline) for label, records in runs])

    st.subheader("Export for slides")
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        "Token stream (HTML)", html_file, file_name="specviz-stream.html", mime="text/html", key="export_html", on_click="ignore",
        icon=":material/download:", help="One standalone file, styles inline, no scripts: open it in a browser or drop it into slides.",
    )  # fmt: skip
    right.download_button(
        "Rounds table (CSV)", csv_file, file_name="specviz-rounds.csv", mime="text/csv", key="export_csv", on_click="ignore",
        icon=":material/download:", help="One row per round and run: drafted, accepted, timings, α, tokens per pass, speedup, and the round's tokens.",
    )  # fmt: skip
    st.caption("The files hold the rounds run so far; step further and download again for more.")
