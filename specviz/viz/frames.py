"""Records -> tidy pandas DataFrames: one row per round, per drafted token, per shown token, per chart bar.

Figures and the token view are built from these frames on every rerun; nothing here is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specviz.core.metrics import running_totals, table_slots
from specviz.core.records import StepRecord
from specviz.core.theory import expected_tokens, speedup
from specviz.viz.tokens import visible_plain

TokenText = Callable[[int], str]  # token id -> its text (decoded by the caller; untrusted)


ROUNDS_FRAME_COLUMNS = [
    "run", "round", "k", "drafted", "accepted", "emitted", "bonus", "has_q", "draft_ms", "verify_ms", "round_ms",
    "passes", "tokens", "decode_ms", "acceptance_rate", "alpha", "tokens_per_target_pass", "c", "baseline_ms", "speedup", "speedup_disturbed",
]  # fmt: skip


def _nan(x: float | None) -> float:
    return np.nan if x is None else float(x)


def rounds_frame(records: Sequence[StepRecord], run: str = "speculative", baseline: Sequence[StepRecord] = ()) -> pd.DataFrame:
    """One row per round: the round's own numbers and the running metrics up to and including it, tabulated from
    specviz.core.metrics.running_totals (nothing is derived here; None is NaN). With baseline records (plain decoding
    of the same target and prompt) the measured speedup and c, by core.metrics' one baseline rule; then the theory:
    the tokens per pass and the speedup Leviathan's formulas predict at those numbers."""
    rows = [  # "round" counts from 1 here and in every frame, as the page says it (a record's index counts from 0)
        {
            "run": run, "round": r.index + 1, "k": r.num_draft_tokens, "drafted": r.num_drafted, "accepted": r.num_accepted,
            "emitted": len(r.emitted), "bonus": int("bonus" in r.emitted_fates), "has_q": r.has_q,
            "draft_ms": r.draft_ms, "verify_ms": r.verify_ms, "round_ms": r.round_ms,
            "passes": t.rounds, "tokens": t.new_tokens, "decode_ms": t.decode_ms,
            "acceptance_rate": _nan(t.acceptance_rate), "alpha": _nan(t.alpha), "tokens_per_target_pass": _nan(t.tokens_per_target_pass),
            "c": _nan(t.draft_cost), "baseline_ms": _nan(t.baseline_ms), "speedup": _nan(t.speedup), "speedup_disturbed": t.speedup_disturbed,
        }
        for r, t in zip(records, running_totals(records, baseline))
    ]  # fmt: skip
    df = pd.DataFrame(rows, columns=ROUNDS_FRAME_COLUMNS)
    for name in ("acceptance_rate", "alpha", "tokens_per_target_pass", "c", "baseline_ms", "speedup"):
        df[name] = df[name].astype(float)
    df["speedup_disturbed"] = df["speedup_disturbed"].astype(bool)
    # k for the formulas: the k asked per round, averaged (it moves under adaptive k and near the length limit)
    df["k_mean"] = (df["k"].expanding().mean() if len(df) else df["k"].astype(float)).round().astype(int)
    df["theory_tokens_per_target_pass"] = [expected_tokens(a, k) if pd.notna(a) else np.nan for a, k in zip(df["alpha"], df["k_mean"])]
    df["predicted_speedup"] = [
        speedup(a, k, c) if pd.notna(a) and pd.notna(c) else np.nan for a, k, c in zip(df["alpha"], df["k_mean"], df["c"])
    ]
    return df


def verify_cost_ratio(records: Sequence[StepRecord], baseline: Sequence[StepRecord]) -> float | None:
    """Mean target pass time over k+1 tokens (rounds that drafted) / mean one-token pass time of the baseline."""
    spec = [r.verify_ms for r in records if r.num_drafted > 0]
    base = [r.verify_ms for r in baseline]
    if not spec or not base:
        return None
    return float(np.mean(spec) / np.mean(base))


def drafts_frame(records: Sequence[StepRecord], token_text: TokenText | None = None) -> pd.DataFrame:
    """One row per drafted token: its p_target, q_draft, min(1, p/q), the uniform draw and its fate."""
    rows = []
    for r in records:
        for i, tok in enumerate(r.drafted):
            rows.append(
                {
                    "round": r.index + 1,
                    "position": i,
                    "token_id": tok,
                    "token": token_text(tok) if token_text else str(tok),
                    "p_target": r.p_target[i],
                    "q_draft": r.q_draft[i],
                    "accept_prob": r.accept_prob[i],
                    "uniform": r.uniforms[i],
                    "fate": r.draft_fates[i],
                    "has_q": r.has_q,
                }
            )
    return pd.DataFrame(rows, columns=["round", "position", "token_id", "token", "p_target", "q_draft", "accept_prob", "uniform", "fate", "has_q"])


HEAD_DRAFT_COLUMNS = ["node", "head", "token_id", "token", "q_draft", "p_target", "fate"]


def head_drafts_frame(record: StepRecord, token_text: TokenText, heads: Sequence[int]) -> pd.DataFrame:
    """One row per drafted token of a Medusa round: the head that proposed it (core.metrics.draft_heads), the
    probability the head gave it (q_draft), the target's p_target there and its fate. Token text is untrusted."""
    rows = [
        {
            "node": i, "head": heads[i], "token_id": tok, "token": visible_plain(token_text(tok)),
            "q_draft": record.q_draft[i], "p_target": record.p_target[i], "fate": record.draft_fates[i],
        }
        for i, tok in enumerate(record.drafted)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=HEAD_DRAFT_COLUMNS)


TABLE_ENTRY_COLUMNS = ["node", "token", "row", "column", "p_target", "fate"]


def table_entries_frame(record: StepRecord, token_text: TokenText, newest_text: str) -> pd.DataFrame:
    """One row per drafted token of a token-recycling round: the table row it came from (the token it follows: the
    newest committed one, newest_text, or its parent node's) and the column there (the target's n-th guess after that
    token, from the last pass that read it), with p_target and its fate. Token text is untrusted."""
    rows = []
    for i, (parent, column) in enumerate(table_slots(record)):
        row = newest_text if parent < 0 else token_text(record.drafted[parent])
        rows.append({"node": i, "token": visible_plain(token_text(record.drafted[i])), "row": visible_plain(row), "column": column,
                     "p_target": record.p_target[i], "fate": record.draft_fates[i]})  # fmt: skip
    return pd.DataFrame(rows, columns=TABLE_ENTRY_COLUMNS)


STREAM_COLUMNS = ["round", "kind", "token_id", "text", "p_target", "q_draft", "accept_prob", "uniform", "residual", "has_q", "first_in_round"]


def stream_frame(records: Sequence[StepRecord], token_text: TokenText) -> pd.DataFrame:
    """Tokens in reading order: each round's accepted drafts, then its thrown-away drafts (rejected, discarded)
    where they were thrown away, then the resampled / bonus / plain-target token. kind names the fate."""
    rows: list[dict] = []
    for r in records:
        start = len(rows)

        def draft_row(i: int, kind: str, r: StepRecord = r) -> dict:
            tok = r.drafted[i]
            return {
                "round": r.index + 1, "kind": kind, "token_id": tok, "text": token_text(tok),
                "p_target": r.p_target[i], "q_draft": r.q_draft[i], "accept_prob": r.accept_prob[i],
                "uniform": r.uniforms[i], "residual": np.nan, "has_q": r.has_q,
            }

        path = list(r.node_path)
        thrown = [draft_row(i, r.draft_fates[i]) for i in range(r.num_drafted) if i not in path]
        for j, (tok, fate) in enumerate(zip(r.emitted, r.emitted_fates)):
            if fate == "accepted":
                rows.append(draft_row(path[j], "accepted"))
                continue
            rows.extend(thrown)
            thrown = []
            rows.append(
                {
                    "round": r.index + 1, "kind": fate, "token_id": tok, "text": token_text(tok),
                    "p_target": r.next_p_target, "q_draft": np.nan, "accept_prob": np.nan, "uniform": np.nan,
                    "residual": r.next_residual if r.next_residual is not None else np.nan, "has_q": r.has_q,
                }
            )
        rows.extend(thrown)  # an EOS cut can end the round before the resampled token
        for k, row in enumerate(rows[start:]):
            row["first_in_round"] = k == 0
    return pd.DataFrame(rows, columns=STREAM_COLUMNS)


def latency_frame(records: Sequence[StepRecord], run: str) -> pd.DataFrame:
    """Gap before each committed token. A round's tokens arrive together: the first waits the whole round,
    the rest arrive 0 ms later."""
    gaps = [(r.round_ms if i == 0 else 0.0) for r in records for i in range(len(r.emitted))]
    return pd.DataFrame({"run": run, "token": np.arange(1, len(gaps) + 1), "gap_ms": gaps})


@dataclass(frozen=True)
class PositionInfo:
    """What the rule did at one verified position of a round (for the inspector's caption and marks)."""

    position: int
    kind: str  # "draft" at a drafted position, "bonus" after all drafts, "target" in a round with no draft
    drafted: int | None  # the drafted token id at a drafted position
    fate: str | None  # accepted / rejected at a drafted position
    p_target: float | None
    q_draft: float | None
    accept_prob: float | None
    uniform: float | None
    next_token: int | None  # the resampled / bonus / plain-target token emitted here
    next_fate: str | None
    node: int | None = None  # the drafted token's index in the record (a chain's position, a tree's node)
    residual_needed: bool | None = None  # max(0, p_target - q_draft) has mass here (None: no q_draft, or a tree)


def num_positions(record: StepRecord) -> int:
    """Positions the inspector can show: the verified drafted positions, plus the bonus position if reached."""
    return len(record.dists)


def position_info(record: StepRecord, position: int) -> PositionInfo:
    """What the rule did at emitted position j, a chain's or a tree's alike (positions follow the accepted path):
    the accepted node there, or at the round's last position the last child the rule rejected; a bonus (a plain
    target token in a round that drafted nothing) when the path ended at a leaf."""
    if not 0 <= position < num_positions(record):
        raise ValueError(f"round {record.index} has positions 0..{num_positions(record) - 1}; got {position}.")
    path = record.node_path
    emitted_here = position < len(record.emitted) and record.emitted_fates[position] != "accepted"
    next_token = record.emitted[position] if emitted_here else None
    next_fate = record.emitted_fates[position] if emitted_here else None
    if position < len(path):
        node = path[position]
    else:
        parent = path[-1] if path else -1
        tried = [i for i, j in enumerate(record.node_parents) if j == parent and record.draft_fates[i] == "rejected"]
        node = tried[-1] if tried else None
    if node is None:
        kind = "bonus" if record.num_drafted else "target"
        return PositionInfo(position, kind, None, None, None, None, None, None, next_token, next_fate)
    return PositionInfo(
        position, "draft", record.drafted[node], record.draft_fates[node], record.p_target[node], record.q_draft[node],
        record.accept_prob[node], record.uniforms[node], next_token, next_fate, node=node,
        residual_needed=residual_has_mass(record, position),
    )


RESIDUAL_EPS = 1e-6  # p_target above q_draft by less than this counts as equal (float noise of one softmax)


def residual_has_mass(record: StepRecord, position: int) -> bool | None:
    """Whether max(0, p_target - q_draft) has mass at a chain round's drafted position. Where p <= q everywhere the
    rule never resamples there (the draft is always kept), and specviz.core.verify.residual falls back to p_target:
    the record then holds p_target as "the residual", which a chart must not draw as one. The record keeps the top
    ids of p, q and the residual, so a residual with mass shows where p > q at one of them. None without a q_draft."""
    dist = record.dists[position]
    if record.tree_parents or dist.q_draft is None or dist.residual is None:
        return None
    return any(p - q > RESIDUAL_EPS for p, q in zip(dist.p_target, dist.q_draft))


def latest_drafting_round(records: Sequence[StepRecord]) -> int:
    """The newest round that drafted something (the inspector's default: a round with nothing drafted has no rule to
    show); the newest round when none did."""
    return next((r for r in range(len(records) - 1, -1, -1) if records[r].num_drafted), len(records) - 1)


def last_rejection_round(records: Sequence[StepRecord]) -> int | None:
    """The newest round in which the rule rejected a draft, or None."""
    return next((r for r in range(len(records) - 1, -1, -1) if "rejected" in records[r].draft_fates), None)


def position_frame(record: StepRecord, position: int, token_text: TokenText, top: int = 12, min_prob: float = 1e-3) -> pd.DataFrame:
    """The top tokens at one position by p_target, q_draft and the residual (those above min_prob), with a role
    for the drafted and emitted tokens. Columns: token_id, token, p_target, q_draft, residual, role."""
    info = position_info(record, position)
    dist = record.dists[position]
    df = pd.DataFrame(
        {
            "token_id": list(dist.token_ids),
            "p_target": list(dist.p_target),
            "q_draft": list(dist.q_draft) if dist.q_draft is not None else np.nan,
            "residual": list(dist.residual) if dist.residual is not None and info.residual_needed is not False else np.nan,
        }
    )  # no residual drawn where p <= q everywhere: the record's "residual" there is p_target itself
    df["role"] = ""
    if info.drafted is not None:
        df.loc[df["token_id"] == info.drafted, "role"] = "drafted"
    if info.next_token is not None:
        mark = df["token_id"] == info.next_token
        df.loc[mark, "role"] = np.where(df.loc[mark, "role"] == "drafted", "drafted+" + info.next_fate, info.next_fate)
    score = df[["p_target", "q_draft", "residual"]].max(axis=1, skipna=True)
    keep = (df["role"] != "") | score.rank(ascending=False, method="first").le(top)
    df = df[keep & ((score >= min_prob) | (df["role"] != ""))].copy()
    df = df.sort_values(["p_target", "q_draft"], ascending=False, na_position="last").reset_index(drop=True)
    df["token"] = unique_labels([token_text(t) for t in df["token_id"]], df["token_id"].tolist())
    return df[["token_id", "token", "p_target", "q_draft", "residual", "role"]]


def unique_labels(texts: Sequence[str], ids: Sequence[int]) -> list[str]:
    """Category labels for charts: whitespace made visible; two tokens that print alike get their ids."""
    shown = [visible_plain(t) or "∅" for t in texts]
    dupes = {s for s in shown if shown.count(s) > 1}
    return [f"{s} #{i}" if s in dupes else s for s, i in zip(shown, ids)]


def progress_frame(records: Sequence[StepRecord], run: str) -> pd.DataFrame:
    """Tokens committed after each round against cumulative decode time (prefill excluded); starts at (0, 0)."""
    totals = running_totals(records)
    return pd.DataFrame({"run": run, "decode_ms": [0.0] + [t.decode_ms for t in totals], "tokens": [0] + [t.new_tokens for t in totals]})
