"""Token-tree rounds -> a node frame -> a plotly tree (nodes coloured by fate, the accepted path highlighted)
and the tree attention mask as a matrix. Never imports streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from specviz.core.records import StepRecord
from specviz.core.tree import tree_depths, tree_mask
from specviz.viz import style
from specviz.viz.frames import TokenText
from specviz.viz.style import TEMPLATE
from specviz.viz.tokens import visible_plain

FATE_COLOURS = {"accepted": style.ACCEPTED, "rejected": style.REJECTED, "discarded": style.LIGHT_GREY, "root": style.P_TARGET, "next": style.RESAMPLED}
TREE_COLUMNS = ["node", "parent", "depth", "slot", "token_id", "token", "p_target", "q_draft", "p_current", "accept_prob", "uniform", "fate", "on_path", "head"]


def tree_frame(record: StepRecord, token_text: TokenText, heads: Sequence[int] = ()) -> pd.DataFrame:
    """One row per node of a tree round. p_target and q_draft at the node's parent context; p_current is p at
    the node's token when the rule tried it (the residual left by rejected siblings before it). heads: the Medusa
    head of each node (specviz.core.metrics.draft_heads), or () for other drafters (head is then NaN)."""
    depth = tree_depths(record.tree_parents)
    slots: dict[int, int] = {}
    rows = []
    for i, (tok, parent) in enumerate(zip(record.drafted, record.tree_parents)):
        rows.append(
            {
                "node": i,
                "parent": parent,
                "depth": depth[i] + 1,  # the root (newest committed token) is depth 0
                "slot": slots.setdefault(parent, 0),
                "token_id": tok,
                "token": token_text(tok),
                "p_target": record.p_target[i],
                "q_draft": record.q_draft[i] if record.has_q else np.nan,
                "p_current": record.tree_p_current[i],
                "accept_prob": record.accept_prob[i],
                "uniform": record.uniforms[i],
                "fate": record.draft_fates[i],
                "on_path": i in record.accepted_path,
                "head": heads[i] if heads else np.nan,
            }
        )
        slots[parent] += 1
    return pd.DataFrame(rows, columns=TREE_COLUMNS)


def _layout(frame: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """(x, y) per node: x = depth, y spread so siblings sit side by side under their parent (-1 is the root)."""
    pos: dict[int, tuple[float, float]] = {-1: (0.0, 0.0)}
    leaves_below: dict[int, int] = {}
    for node in reversed(frame["node"].tolist()):  # children come after parents: count leaves bottom-up
        kids = frame.loc[frame["parent"] == node, "node"].tolist()
        leaves_below[node] = max(1, sum(leaves_below[k] for k in kids))
    def place(parent: int, top: float) -> None:
        for kid in frame.loc[frame["parent"] == parent, "node"].tolist():
            span = leaves_below[kid]
            pos[kid] = (float(frame.loc[kid, "depth"]), -(top + (span - 1) / 2.0))
            place(kid, top)
            top += span
    place(-1, 0.0)
    return pos


def _hover(row: pd.Series) -> str:
    q = "—" if np.isnan(row["q_draft"]) else f"{row['q_draft']:.3f}"
    tried = row["fate"] != "discarded"
    head = "" if pd.isna(row["head"]) else f"Medusa head {int(row['head'])}'s "
    lines = [
        f"node {row['node']} · <b>{html.escape(visible_plain(row['token']))}</b> (id {row['token_id']}) · {row['fate']}",
        f"{head}q_draft (at its parent) = {q}",
        f"p_target (at its parent) = {row['p_target']:.3f}",
    ]
    if tried:
        lines += [f"p when tried (residual after siblings) = {row['p_current']:.3f}", f"u = {row['uniform']:.3f} vs accept = {row['accept_prob']:.3f}"]
    return "<br>".join(lines)


def tree_figure(record: StepRecord, token_text: TokenText, root_text: str = "context", heads: Sequence[int] = ()) -> go.Figure:
    """The round's tree, root (the newest committed token) at the left: nodes coloured by fate, the accepted
    path drawn thick, the next token (resampled or bonus) hung off the path's end in orange. With Medusa heads the
    depth axis is labelled by head (depth d: head d's guesses)."""
    frame = tree_frame(record, token_text, heads)
    pos = _layout(frame)
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for _, row in frame.iterrows():
        (x0, y0), (x1, y1) = pos[int(row["parent"])], pos[int(row["node"])]
        fig.add_trace(go.Scatter(
            x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
            line=dict(color=FATE_COLOURS["accepted"] if row["on_path"] else style.LIGHT_GREY, width=5 if row["on_path"] else 1.5),
        ))  # fmt: skip
    end = record.accepted_path[-1] if record.accepted_path else -1
    emitted_next = len(record.emitted) > len(record.accepted_path)
    if emitted_next:
        x0, y0 = pos[end]
        nxt = record.emitted[len(record.accepted_path)]
        fate = record.emitted_fates[len(record.accepted_path)]
        fig.add_trace(go.Scatter(x=[x0, x0 + 1], y=[y0, y0 + 0.35], mode="lines", line=dict(color=FATE_COLOURS["next"], width=3, dash="dot"), hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(
            x=[x0 + 1], y=[y0 + 0.35], mode="markers+text", text=[html.escape(visible_plain(token_text(nxt)))], textposition="top center",
            marker=dict(size=18, color=FATE_COLOURS["next"], symbol="diamond"), name=fate,
            hovertext=[f"{fate}: <b>{html.escape(visible_plain(token_text(nxt)))}</b> (id {nxt}), p_target = {record.next_p_target:.3f}"],
            hoverinfo="text",
        ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=[0.0], y=[0.0], mode="markers+text", text=[html.escape(root_text)], textposition="top center",
        marker=dict(size=16, color=FATE_COLOURS["root"]), name="root", hovertext=["the newest committed token: every node sees it"], hoverinfo="text",
    ))  # fmt: skip
    for fate in ("accepted", "rejected", "discarded"):
        part = frame[frame["fate"] == fate]
        if part.empty:
            continue
        xy = [pos[int(n)] for n in part["node"]]
        fig.add_trace(go.Scatter(
            x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers+text", name=fate,
            text=[html.escape(visible_plain(t)) for t in part["token"]], textposition="top center",
            marker=dict(size=14, color=FATE_COLOURS[fate], line=dict(width=2, color=style.INK)),
            hovertext=[_hover(row) for _, row in part.iterrows()], hoverinfo="text",
        ))  # fmt: skip
    depth_axis = dict(title="depth (tokens after the committed context)", dtick=1, zeroline=False)
    if heads:  # depth d holds head d's top guesses
        ticks = sorted({int(d) for d in frame["depth"]})
        depth_axis = dict(title="Medusa head (depth d: head d's guesses)", tickvals=[0, *ticks], ticktext=["context", *(f"head {d}" for d in ticks)], zeroline=False)
    fig.update_layout(
        title=f"Round {record.index + 1}: a tree of {record.num_drafted} nodes, {len(record.accepted_path)} accepted",
        xaxis=depth_axis,
        yaxis=dict(visible=False), height=380, margin=dict(l=30, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.3),
    )  # fmt: skip
    return fig


def mask_frame(record: StepRecord, token_text: TokenText) -> pd.DataFrame:
    """The verify pass's attention among the tree's rows: the root plus each node (rows attend to columns).
    Every row also sees the whole committed context, left out here. Columns: query, key, sees."""
    labels = ["root"] + [f"{i}: {visible_plain(token_text(t))}" for i, t in enumerate(record.drafted)]
    parents = [-1] + [j + 1 for j in record.tree_parents]
    mask, _ = tree_mask(parents, cached=0)
    sees = mask[0, 0].numpy()
    return pd.DataFrame(
        [{"query": labels[i], "key": labels[j], "sees": bool(sees[i, j])} for i in range(len(labels)) for j in range(len(labels))]
    )


def mask_figure(record: StepRecord, token_text: TokenText) -> go.Figure:
    """The tree attention mask as a matrix: a filled cell means the row's node attends to the column's."""
    frame = mask_frame(record, token_text)
    labels = list(dict.fromkeys(frame["query"]))
    z = frame["sees"].to_numpy(dtype=float).reshape(len(labels), len(labels))
    shown = [html.escape(s) for s in labels]
    fig = go.Figure(go.Heatmap(
        z=z, x=shown, y=shown, colorscale=[[0, style.PAPER], [1, style.P_TARGET]], showscale=False, xgap=1, ygap=1,
        hovertemplate="%{y} sees %{x}: %{z}<extra></extra>",
    ), layout=dict(template=TEMPLATE))  # fmt: skip
    fig.update_layout(
        title="Tree attention mask",
        xaxis=dict(title="key (attended to)", side="top", tickangle=-45), yaxis=dict(title="query (node)", autorange="reversed"),
        height=360, margin=dict(l=60, r=20, t=90, b=20),
    )  # fmt: skip
    return fig


