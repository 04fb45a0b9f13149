"""The shipped example recordings (chain runs, saved before records had a chain-as-tree view) replay to the very
frames, figures, CLI JSON and metrics they gave when these digests were taken: a refactor of how records, frames and
metrics read a round (chain or tree) must not change a chain run's output by one character.

The digests were taken on the code before StepRecord.node_parents existed. When a view changes on purpose, print the
new ones with ``PYTHONPATH=. python tests/test_chain_views_pinned.py`` and say in the commit which view changed and why.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from specviz.core.metrics import accepted_depth, draft_depth, draft_heads, position_acceptance, run_metrics, table_slots
from specviz.recording.load import load_recording
from specviz.recording.record_json import step_to_json

RECORDINGS = Path(__file__).resolve().parent.parent / "assets" / "recordings"

PINNED = {
    "code-lookup-adaptive-k.json": (
        "accepted_figure=33dc92a010eb8dc6,alpha_figure=d569374980783abe,baseline_error=78658938e053e926,depths=0db26cf99bd36377,drafts=ec069bc247930f7a,inspector=9252a8ad6cb0b8bb,json=aaccd83038d3dc05,latency=97bc40799272ede2,latency_figure=fad3ce817dd4c82c,metrics=eb6686e81d4e5ea9,position=0f66db6d42efa0a9,progress=57d3596b2117ce83,progress_figure=1677b05d7a1dbf6c,prompt_texts=a4ae93c981f6eae4,rounds=ab9d986cab4736ee,speedup_figure=c636a83216e7e31e,stream=06c1e292b4ec9e56,stream_html=da9030d47827dc49,tokens_per_target_pass_figure=b1d64c8c0d2389c7"
    ),
    "compare-ngram-vs-early-exit.json": (
        "accepted_figure=02df04f43a7121a1,alpha_figure=548ba8601ccce8e8,baseline_error=78658938e053e926,depths=9b416b62b8719ac6,drafts=3357e73d63e22d99,inspector=272dd8bdaf039c9e,json=20d23eaa06e4719b,latency=028db3de854a83ac,latency_figure=5619673ddc7a4974,metrics=651acc2b620e8500,position=c044948430fa8fa5,progress=b42b750e07929124,progress_figure=381b29d8231ab83c,prompt_texts=014a94b25765f422,rounds=054b51d7e2448fb0,speedup_figure=30947a5ce3723a05,stream=23d6c6f313a44118,stream_html=f19ceff3ffb82d2f,tokens_per_target_pass_figure=c7d94c0da04082ed"
    ),
    "copy-ngram-greedy.json": (
        "accepted_figure=01f4209d58346b61,alpha_figure=90d0652a5a7eec75,baseline_error=78658938e053e926,depths=84d02faf6ad17e9d,drafts=e0d82632994061de,inspector=cab091e53ddcc6da,json=060410307d43e534,latency=951f8e6cc4006a1d,latency_figure=7b88e2286f28b297,metrics=e707defffdc77e36,position=58d19963807fcafd,progress=c7e060cb4386badd,progress_figure=f1307e91ecda278e,prompt_texts=219fd03f1ebbe279,rounds=c0f82a1f026279ab,speedup_figure=2256e873a252c431,stream=02431be95465f24c,stream_html=aded81da5367a991,tokens_per_target_pass_figure=95828c3463f33df2"
    ),
    "prose-early-exit-T1.json": (
        "accepted_figure=d75a919576505c2f,alpha_figure=7c11e86b35878a91,baseline_error=78658938e053e926,depths=036a37201c794256,drafts=51b62f69cd298080,inspector=9e8f40e0aee72104,json=fe9409fb45aa224b,latency=468a779b9d311a2c,latency_figure=eb7540660c8af0e2,metrics=336bc2b00636f6f1,position=370622ed4637fa47,progress=ec40078cf4d2f322,progress_figure=4a912ad6ac84ea58,prompt_texts=20e7171d6277bdf7,rounds=65abff15c382c265,speedup_figure=94b3e30b3989594d,stream=0eb785c51808f31b,stream_html=c1301a64b1f8cb1d,tokens_per_target_pass_figure=545bbdf586cd69c7"
    ),
    "unicode-pieces.json": (
        "accepted_figure=7422fad767a5f1ba,alpha_figure=032922f53d593d8f,baseline_error=78658938e053e926,depths=167fe5c1520bace2,drafts=51b823f4a34813dd,inspector=d727b2e00d83397c,json=031e80c16ba9d782,latency=51e628ebabe994df,latency_figure=54221d7e165d2a37,metrics=10eaa222c0bc03dc,position=7d0901b34eb5cd8b,progress=cfe8dc7ac3c60405,progress_figure=de670f87c610d1a1,prompt_texts=2f541bdbdef19926,rounds=fb1c1fdbb05bb84a,speedup_figure=37c07954cacdd2c9,stream=d3d03f16fca1f28f,stream_html=d44ef4cb72639120,tokens_per_target_pass_figure=7ad8fca5ae381766"
    ),
}


def _text(value: object) -> str:
    if isinstance(value, pd.DataFrame):
        return f"{value.dtypes.to_dict()}\n{value.to_csv()}"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)


def views_digests(path: Path) -> dict[str, str]:
    """One digest per kind of view (stream, drafts, position, inspector, the figures, json, metrics) of a recording."""
    from specviz.ui.step_through.replay import ReplaySession
    from tests.test_recording import views_of

    recording = load_recording(path.read_bytes())
    shown = max(len(r.records) for r in recording.runs)
    views = views_of(ReplaySession.open(recording, "pinned", shown=shown))
    base = recording.baseline.records if recording.baseline is not None else ()
    for run in recording.runs:
        recs = run.records
        views[f"{run.label}/json"] = [step_to_json(r) for r in recs]
        views[f"{run.label}/metrics"] = run_metrics(recs, base).to_json()
        views[f"{run.label}/depths"] = [
            (accepted_depth(r), draft_depth(r), draft_heads(r), table_slots(r)) for r in recs
        ] + [repr(position_acceptance(recs))]
    digests: dict[str, hashlib._Hash] = {}
    for key in sorted(views):
        digests.setdefault(key.rsplit("/", 1)[-1], hashlib.sha256()).update(f"{key}\n{_text(views[key])}\n".encode())
    return {kind: h.hexdigest()[:16] for kind, h in sorted(digests.items())}


def _digest(kinds: dict[str, str]) -> str:
    return ",".join(f"{kind}={d}" for kind, d in kinds.items())


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", sorted(PINNED))
def test_chain_recordings_replay_to_the_pinned_views(name):
    assert _digest(views_digests(RECORDINGS / name)) == PINNED[name]


if __name__ == "__main__":
    for p in sorted(RECORDINGS.glob("*.json")):
        print(f'    "{p.name}": "{_digest(views_digests(p))}",')
