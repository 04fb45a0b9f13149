"""The step-through page's token-tree view: a tree round drawn as a tree beside its attention mask."""

from __future__ import annotations

import streamlit as st

from specviz.core.metrics import draft_heads
from specviz.ui.common import widgets
from specviz.ui.common.memo import memo
from specviz.ui.step_through.inspector import by_head
from specviz.ui.step_through.step_views import ViewSource
from specviz.viz.markdown import md_text
from specviz.viz.tree import mask_figure, tree_figure


def _from_one(index: int) -> str:
    """A round's index as the page counts rounds (from 1)."""
    return str(index + 1)


def tree_rounds(session: ViewSource) -> None:
    """For each run that drafted token trees: pick a tree round (the latest by default), draw its tree and mask.
    Draws nothing for chain runs, so the page can call it unconditionally."""
    runs = [run for run in session.runs if any(r.is_tree for r in run.records)]
    if not runs:
        return
    st.subheader("Token tree")
    run = runs[0]
    if len(runs) > 1:
        label = widgets.radio("tree run", [r.label for r in runs], horizontal=True, key="tree_run", format_func=md_text)  # options are Markdown
        run = next(r for r in runs if r.label == label)
    trees = [r for r in run.records if r.is_tree]
    if len(trees) == 1:
        record = trees[0]
    else:
        # the key names the count, so a new tree round resets the slider to the latest one
        index = widgets.select_slider("tree round", [r.index for r in trees], value=trees[-1].index, key=f"tree_round_{run.label}_{len(trees)}", format_func=_from_one)
        record = next(r for r in trees if r.index == index)
    heads = draft_heads(record) if by_head(run.config) else ()
    left, right = st.columns([3, 2])
    with left:
        figure = memo(session, f"tree:{run.label}", (record.index,), lambda: tree_figure(record, session.token_text, heads=heads))
        st.plotly_chart(figure, width="stretch", key="tree_chart", config={"displayModeBar": False})
        if heads:
            st.caption(
                "Medusa's tree: level d holds head d's top guesses for the token d places ahead, each hung under the "
                "spine (the previous heads' first choices), so the columns are the heads. The tree is fixed before the "
                "target sees it; one pass verifies every node."
            )
        st.caption(
            "Look at which branch survived: green nodes were accepted, red ones tried and rejected, grey ones never "
            "tried (their parent was rejected). The thick line is the accepted path; the orange diamond is the token "
            "the target added (resampled after the last rejection, or a bonus at an accepted leaf). Hover a rejected "
            "sibling for its q_draft, p_target and the residual p it was tried against: each rejection removes that "
            "token from p, so the next sibling faces a renormalised p."
        )
    with right:
        mask = memo(session, f"mask:{run.label}", (record.index,), lambda: mask_figure(record, session.token_text))
        st.plotly_chart(mask, width="stretch", key="tree_mask_chart", config={"displayModeBar": False})
        st.caption(
            "One target pass scored every node: row = node, filled cell = a token it may attend to. Each node sees "
            "only its ancestors (and the whole committed context), at position = its depth, so its logits equal "
            "those of its branch decoded alone. Siblings never see each other."
        )
