"""The JSON `python -m specviz generate --json` prints for a run: each round's record (step_to_json), as a plain dict; the run's
statistics are specviz.core.metrics.RunMetrics.to_json(). The recording's file format (specviz.recording.schema) stores records field by
field instead; this is the smaller view scripts read from the command line's output."""

from __future__ import annotations

from specviz.core.records import StepRecord


def step_to_json(r: StepRecord) -> dict:
    step = _chain_step_to_json(r)
    if r.is_tree:  # a token-tree round: every node, and the path the rule accepted
        step["tree"] = {
            "nodes": [
                {"token": t, "parent": par, "q_draft": q, "p_target": p, "fate": f}
                for t, par, q, p, f in zip(r.drafted, r.tree_parents, r.q_draft, r.p_target, r.draft_fates)
            ],
            "accepted_path": list(r.accepted_path),
        }
    return step


def _chain_step_to_json(r: StepRecord) -> dict:
    return {
        "drafted": list(r.drafted),
        "num_accepted": r.num_accepted,
        "fates": list(r.draft_fates),
        "emitted": list(r.emitted),
        "emitted_fates": list(r.emitted_fates),
        "num_draft_tokens": r.num_draft_tokens,
        "draft_ms": round(r.draft_ms, 3),
        "verify_ms": round(r.verify_ms, 3),
        "round_ms": round(r.round_ms, 3),  # drafting, verify pass, rule, commit and rollback
        "record_ms": round(r.record_ms, 3),  # building the chart record, outside round_ms
        **({"k_reason": r.k_choice.sentence()} if r.k_choice is not None else {}),  # why k: auto chose num_draft_tokens
    }
