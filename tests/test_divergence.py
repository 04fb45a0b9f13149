"""first_divergence: where two greedy outputs part, with the top-2 margins there (the bf16 honesty note)."""

from __future__ import annotations

from specviz.core.divergence import Divergence, first_divergence


def test_identical_outputs_have_no_divergence():
    assert first_divergence([1, 2, 3], [0.5, 1.0, 2.0], [1, 2, 3], [0.5, 1.0, 2.0]) is None
    assert first_divergence([], [], [], []) is None


def test_the_first_differing_position_and_both_margins():
    d = first_divergence([1, 2, 9, 4], [3.0, 2.0, 0.01, 1.0], [1, 2, 3, 4], [3.0, 2.0, 0.02, 1.0])
    assert d == Divergence(position=2, token=9, baseline_token=3, margin=0.01, baseline_margin=0.02)
    assert d.to_dict() == {"position": 2, "token": 9, "baseline_token": 3, "margin": 0.01, "baseline_margin": 0.02}


def test_a_run_that_ends_early_differs_where_it_ends():
    d = first_divergence([1, 2], [1.0, 1.0], [1, 2, 3], [1.0, 1.0, 0.5])
    assert d == Divergence(2, None, 3, None, 0.5)


def test_prefix_only_ignores_a_baseline_still_being_stepped():
    assert first_divergence([1, 2, 3, 4], [1.0] * 4, [1, 2], [1.0] * 2, prefix_only=True) is None
    assert first_divergence([1, 5, 3, 4], [1.0] * 4, [1, 2], [1.0, 0.25], prefix_only=True).position == 1


# -- the step-through page's note --------------------------------------------------------------------------


def _session(run_tokens, base_tokens, temperature=0.0):
    from types import SimpleNamespace

    from specviz.config import RunConfig
    from specviz.ui.step_through.session import Run, StepSession
    from tests.plain_baseline import Baseline

    def decoder(tokens):
        records = [SimpleNamespace(emitted=tuple(tokens), emitted_margin=(0.5,) * len(tokens))]
        return SimpleNamespace(generated=list(tokens), records=records)

    config = RunConfig(temperature=temperature)
    run = Run("lookup", config, decoder(run_tokens))
    return StepSession("p", config, None, [1], str, [run], Baseline(decoder(base_tokens))), run


def test_page_note_warns_with_position_and_margin(monkeypatch):
    from specviz.ui.step_through import step_views

    warnings: list[str] = []
    monkeypatch.setattr(step_views.st, "warning", warnings.append)
    session, run = _session([4, 5, 6, 7], [4, 5, 9])
    step_views.divergence_notes(session)
    assert len(warnings) == 1 and "new token 3" in warnings[0] and "margin there: 0.5" in warnings[0] and "float32" in warnings[0]
    warnings.clear()
    for same in (_session([4, 5, 6, 7], [4, 5]), _session([4, 5, 6], [4, 5, 9], temperature=1.0)):
        step_views.divergence_notes(same[0])  # a baseline still stepping, or a sampled run: nothing to say
    assert warnings == []


def test_one_first_difference_rule():
    from specviz.core.divergence import first_difference

    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # one ended first
    assert first_difference([1, 2], [1, 2, 3], prefix_only=True) is None
