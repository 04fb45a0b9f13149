"""k: auto (specviz.core.auto_k): the policy on toy costs and acceptance (k = 0 when drafting cannot pay, a larger k on
high acceptance, a probe after N plain rounds), its reason on every record, and exactness with auto on: greedy equals
plain greedy, and sampled first tokens follow the target (with a known-bad control that picks k from the round's own
outcome)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specviz.core.auto_k import AutoCosts, Evidence, acceptance, choose_k, observe
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder, resume
from specviz.core.sampling import SamplingConfig
from specviz.core.theory import VerifyCurve
from specviz.drafters import ModelDrafter, NGramDrafter, PromptLookupDrafter
from tests.test_app_compare_tree import local  # noqa: F401  (a fixture)
from tests.toys import BigramLM, TableLM, assert_first_two, first_two_tokens, plain_greedy

pytestmark = pytest.mark.usefixtures("one_thread")

CPU_LIKE = VerifyCurve((1.0, 1.19, 1.18, 1.44, 1.49, 1.71, 1.76, 1.91, 1.95))  # the first shipped profile_cpu.json's shape
PROMPT = [1, 2, 3, 4, 1, 2, 3]


def evidence_of(rounds: list[tuple[int, int]], costs: AutoCosts) -> Evidence:
    """Evidence after chain rounds of (drafted, accepted)."""
    ev = Evidence()
    for drafted, accepted in rounds:
        ev = observe(costs, ev, drafted, accepted, drafted)
    return ev


def test_k_is_zero_when_drafting_cannot_pay():
    costly = AutoCosts(verify=CPU_LIKE, draft_cost=0.9, prior=(0.6,))  # a draft step nearly as dear as a target pass
    choice = choose_k(costly, Evidence(), 1, 8)
    assert choice.k == 0 and choice.tokens_per_pass == 1.0 and choice.next_tokens_per_pass < 1.0
    hopeless = AutoCosts(verify=CPU_LIKE, draft_cost=0.0, prior=(0.6,))
    assert choose_k(hopeless, evidence_of([(4, 0)] * 10, hopeless), 1, 8).k == 0  # free drafts that are never kept
    assert choose_k(hopeless, Evidence(), 1, 8).k > 0  # known-bad control: the prior alone says drafting pays


def test_k_climbs_on_text_whose_every_draft_is_kept():
    """Copyable text: every draft passes. The position just past the deepest one drafted takes its neighbour's
    estimate, not the benchmark's average acceptance, so k keeps growing (at a prior of 0.5 it stopped at 4 on the
    CPU's verify curve, 0.63x the best fixed k on the copy prompts)."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.5,))
    ev, ks = Evidence(), []
    for _ in range(12):
        k = choose_k(costs, ev, 1, 8).k
        ks.append(k)
        ev = observe(costs, ev, k, k, k)
    assert ks[-1] == 8 and ks == sorted(ks), ks


def test_k_grows_with_acceptance():
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.5,))
    low = choose_k(costs, evidence_of([(4, 1)] * 10, costs), 1, 16)
    high = choose_k(costs, evidence_of([(4, 4)] * 10, costs), 1, 16)
    assert 0 < low.k < high.k
    assert high.acceptance[0] > 0.8 and low.acceptance[1] < 0.3  # position 2 leans on position 1 (0.85) as its prior
    assert high.tokens_per_pass >= high.next_tokens_per_pass  # the chosen k beats the runner-up


def test_evidence_by_position_counts_only_positions_reached():
    costs = AutoCosts(verify=1.0, draft_cost=0.0, decay=1.0)
    ev = observe(costs, Evidence(), 4, 1, 4)  # position 1 kept, position 2 rejected, 3 and 4 never tried
    assert ev.reached == (1, 1, 0, 0) and ev.accepted == (1, 0, 0, 0)
    assert observe(costs, ev, 0, 0, 0).plain_streak == 1


def test_a_probe_after_n_plain_rounds():
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.05, prior=(0.7,), probe_every=5)
    ev = evidence_of([(4, 0)] * 10, costs)
    assert choose_k(costs, ev, 1, 8).k == 0
    for _ in range(4):
        ev = observe(costs, ev, 0, 0, 0)
        assert choose_k(costs, ev, 1, 8).k == 0
    ev = observe(costs, ev, 0, 0, 0)  # the fifth plain round
    probe = choose_k(costs, ev, 1, 8)
    assert probe.k > 0 and probe.probe and "probe" in probe.sentence()
    after = observe(costs, ev, probe.k, probe.k, probe.k)  # the text turned copyable: every draft kept
    assert choose_k(costs, after, 1, 8).k > 0 and after.plain_streak == 0


def test_a_k_that_barely_pays_loses_to_a_plain_pass():
    """A k whose expected tokens per pass-equivalent beats 1 by less than the margin is not drafted (on the machine the
    engine's own work makes it lose): toy numbers where k = 1 gives 1.03."""
    costs = AutoCosts(verify=1.1, draft_cost=0.0, prior=(0.133,), probe_every=100)  # k = 1: 1.133 / 1.1 = 1.03
    ev = Evidence(reached=(0.0,), accepted=(0.0,), plain_streak=1)  # past the first round, no evidence: the prior
    assert choose_k(AutoCosts(verify=1.1, draft_cost=0.0, prior=(0.133,), margin=0.0), ev, 1, 1).k == 1  # control: no margin
    choice = choose_k(costs, ev, 1, 1)
    assert choice.k == 0 and 1.0 < choice.next_tokens_per_pass < 1.05 and "by 5%" in choice.sentence()


def test_longer_within_picks_the_longest_k_near_the_best():
    """longer_within: the longest k worth at least (1 - longer_within) of the best k's tokens per pass-equivalent (the
    model prices acceptance position by position and undervalues a long chain on copyable sampled text); the margin
    still judges the best k, so a k that does not pay stays a plain pass."""
    flat = VerifyCurve((1.0, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9))
    plain = AutoCosts(verify=flat, draft_cost=0.0, prior=(0.6,), prior_weight=1.0)
    ev = evidence_of([(8, 3)] * 6, plain)
    base = choose_k(plain, ev, 1, 8)
    near = choose_k(AutoCosts(verify=flat, draft_cost=0.0, prior=(0.6,), prior_weight=1.0, longer_within=0.1), ev, 1, 8)
    assert 0 < base.k < near.k, (base.k, near.k)
    assert near.tokens_per_pass >= 0.9 * base.tokens_per_pass
    hopeless = dict(verify=flat, draft_cost=0.0, prior=(0.6,), probe_every=100)
    ev0 = Evidence(reached=(10.0,), accepted=(0.0,), plain_streak=1)
    assert choose_k(AutoCosts(**hopeless, longer_within=0.5), ev0, 1, 8).k == 0  # nothing pays: no k, however near


def test_a_drafted_rounds_fixed_cost_is_charged_once_a_round():
    """r, the drafter's per-round work the profile's per-token cost leaves out, moves the choice: at a prior of 0.37
    the free round drafts k = 2, a round costing 0.3 passes more drafts nothing; the reason names it."""
    free = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.37,))
    dear = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.37,), round_cost=0.3, probe_every=100)
    assert choose_k(free, Evidence(), 1, 8).k == 2
    cheap = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.37,), round_cost=0.01)
    assert "and 0.01 a round" in choose_k(cheap, Evidence(), 1, 8).sentence()
    ev = Evidence(reached=(1.0,), accepted=(0.37,), plain_streak=1)
    assert choose_k(dear, ev, 1, 8).k == 0


def test_the_first_round_probes_small_when_the_prior_says_no():
    """Before any evidence, a prior that does not pay gives one cheap probe (k = 1), not a long k and not nothing; a
    drafter no text could make pay (every draft kept still loses) never probes."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.15,))
    first = choose_k(costs, Evidence(), 1, 8)
    assert first.k == 1 and first.probe
    after = observe(costs, Evidence(), 1, 0, 1)
    assert choose_k(costs, after, 1, 8).k == 0  # the probe kept nothing: plain from here
    hopeless = AutoCosts(verify=CPU_LIKE, draft_cost=0.9, prior=(0.15,))  # early exit on this CPU: k = 1 at best 2 / 2.09
    assert choose_k(hopeless, Evidence(), 1, 8).k == 0
    assert choose_k(hopeless, Evidence((1.0,), (0.0,), plain_streak=500), 1, 8).k == 0


def test_the_first_rounds_probe_can_wait_while_its_plain_pass_is_free():
    """A run's first round takes its token from the prefill's row when it drafts nothing (no pass at all), so a probe
    there costs a whole pass where one round later it costs a wider pass's difference: with probe_free False the
    first-round probe waits one round. The default probes at once (the app's first Step shows a drafted round), and a
    k that pays on the prior alone is drafted at once either way (the default example's first Step drafts)."""
    waiting = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.2,), probe_free=False)  # no k pays on the prior
    assert choose_k(waiting, Evidence(), 1, 8).probe  # control: a round whose plain pass costs one
    assert choose_k(waiting, Evidence(), 1, 8, free_plain=True).k == 0
    after = observe(waiting, Evidence(), 0, 0, 0)  # that free plain round
    assert choose_k(waiting, after, 1, 8).probe and choose_k(waiting, after, 1, 8).k == 1
    paying = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.8,), probe_free=False)
    assert choose_k(paying, Evidence(), 1, 8, free_plain=True).k > 0
    assert choose_k(AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.2,)), Evidence(), 1, 8, free_plain=True).probe
    dec = SpeculativeDecoder(BigramLM(), ModelDrafter(TableLM(0, noise=2.0), SamplingConfig()), PROMPT,
                             DecodeConfig(max_new_tokens=6, num_draft_tokens=4, auto=waiting))  # fmt: skip
    first, second = dec.step(), dec.step()
    assert first.num_drafted == 0 and second.k_choice is not None and second.k_choice.probe and second.num_drafted == 1


def test_the_opening_rounds_drafts_do_not_count_as_the_texts_acceptance():
    """A run's first round drafts the answer's first tokens from the prompt's end, which the drafters that read the
    target keep almost never (T = 0.7, every prompt, three seeds: Medusa and token recycling 0 of 39, EAGLE 6 of 39;
    their later rounds 26-37 %). Counted as evidence, one rejected opening sent an 8-token answer plain for good
    (Medusa on the Q&A prompt: 0.93x plain, modeled). It leaves the acceptance at the prior, counts as drafted (no
    second first-round probe) and as no failed probe; opening_evidence=True counts it (the control). The decoder
    marks its first record so, live and when a run is restored from its records."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.3,), round_cost=0.05)
    assert choose_k(costs, Evidence(), 1, 8).k == 2  # the prior pays
    opened = observe(costs, Evidence(), 2, 0, 2, opening=True)
    assert choose_k(costs, opened, 1, 8).k == 2 and opened.failed_probes == 0 and opened.plain_streak == 0
    assert acceptance(costs, opened, 2) == acceptance(costs, Evidence(), 2)
    counted = replace(costs, opening_evidence=True)
    assert choose_k(counted, observe(counted, Evidence(), 2, 0, 2, opening=True), 1, 8).k == 0  # control
    assert choose_k(costs, observe(costs, opened, 2, 0, 2), 1, 8).k == 0  # a later round's rejection counts
    shy = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.15,))
    assert choose_k(shy, Evidence(), 1, 8).probe
    assert choose_k(shy, observe(shy, Evidence(), 1, 0, 1, opening=True), 1, 8).k == 0  # one first-round probe
    config = DecodeConfig(max_new_tokens=20, max_draft_tokens=4, auto=AutoCosts(verify=1.1, draft_cost=0.0, prior=(0.9,)))
    dec = SpeculativeDecoder(BigramLM(), ModelDrafter(TableLM(0, noise=2.0), SamplingConfig()), PROMPT, config)
    first = dec.step()
    assert first.num_drafted > 0 and set(dec.auto.evidence.reached) == {0.0}  # drafted, not counted
    opened_only = dec.auto.evidence
    saved = dec.state()
    dec.step(), dec.step()
    live = dec.auto.evidence
    assert live.reached[0] > 0  # later rounds count
    after_two = dec.state()
    dec.restore(saved)
    assert set(dec.auto.evidence.reached) == {0.0}
    dec.step(), dec.step()
    assert dec.auto.evidence == live
    dec.restore(after_two)
    assert dec.auto.evidence == live  # rebuilt from the records, the first one marked as the opening
    drafter = ModelDrafter(TableLM(0, noise=2.0), SamplingConfig())
    resumed = resume(BigramLM(), drafter, PROMPT, dec.generated, dec.records, config, dec.state())
    assert resumed.auto.evidence == live  # a saved run continued: the same evidence
    assert SpeculativeDecoder(BigramLM(), drafter, PROMPT, config, records=dec.records[:1]).auto.evidence == opened_only


def test_probes_back_off_and_start_again_after_a_kept_draft():
    """Each probe that keeps nothing doubles the wait for the next (4, 8, 16, 32, then 32 again); a round that keeps a
    draft starts the count again."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.15,))
    ev, probes_at = observe(costs, Evidence(), 1, 0, 1), []
    for r in range(300):
        choice = choose_k(costs, ev, 1, 8)
        if choice.k:
            assert choice.probe and choice.k == 1
            probes_at.append(r)
        ev = observe(costs, ev, choice.k, 0, choice.k)
    gaps = [b - a for a, b in zip([-1, *probes_at], probes_at)]
    assert gaps[:5] == [5, 9, 17, 33, 33], gaps  # a wait of n plain rounds, then the probe
    assert ev.failed_probes >= 4
    kept = observe(costs, Evidence(ev.reached, ev.accepted, 8, ev.failed_probes), 1, 1, 1)
    assert kept.failed_probes == 0 and costs.probe_wait(kept.failed_probes) == 4


def test_plain_rounds_can_fade_the_evidence_back_to_the_prior():
    """plain_decay < 1 (an A/B knob, off by default): after rejected rounds, each plain round lets the estimate drift
    back toward the prior; at 1 the rejections stand until the next drafted round."""
    fading = AutoCosts(verify=CPU_LIKE, draft_cost=0.15, prior=(0.6,), plain_decay=0.5, probe_every=100)
    standing = AutoCosts(verify=CPU_LIKE, draft_cost=0.15, prior=(0.6,), probe_every=100)
    after = {}
    for name, costs in {"fading": fading, "standing": standing}.items():
        ev = evidence_of([(4, 0)] * 3, costs)
        rejected = acceptance(costs, ev, 1)[0]
        assert rejected < 0.4 and choose_k(costs, ev, 1, 8).k == 0
        for _ in range(10):
            ev = observe(costs, ev, 0, 0, 0)
        after[name] = (rejected, acceptance(costs, ev, 1)[0], choose_k(costs, ev, 1, 8).k)
    assert after["fading"][1] > 0.55 and after["fading"][2] > 0
    assert after["standing"][1] == after["standing"][0] and after["standing"][2] == 0


def test_a_probe_can_draft_the_k_the_estimate_favours():
    """probe_k="best": a probe drafts the k > 0 worth most on this run's estimate (here k = 2: 1.56 tokens for 1.6
    passes beats k = 1's 1.4 for 1.5), not k = 1; "prior" probes at the k the prior alone picks (c0551ae)."""
    curve = VerifyCurve((1.0, 1.5, 1.6, 1.7, 1.8))
    ev = Evidence(reached=(10.0, 4.0), accepted=(4.0, 1.6), plain_streak=8)  # acceptance 0.4 at both positions
    one = choose_k(AutoCosts(verify=curve, draft_cost=0.0, prior=(0.4,)), ev, 1, 4)
    best = choose_k(AutoCosts(verify=curve, draft_cost=0.0, prior=(0.4,), probe_k="best"), ev, 1, 4)
    assert one.probe and one.k == 1 and best.probe and best.k == 2, (one, best)
    assert best.tokens_per_pass < 1.05 and "a probe" in best.sentence()
    prior = AutoCosts(verify=curve, draft_cost=0.0, prior=(0.9,), probe_k="prior")
    assert choose_k(prior, Evidence((10.0,), (0.0,), plain_streak=8), 1, 4).k == 4  # the prior alone: 0.9 pays at k = 4
    with pytest.raises(ValueError, match="probe_k"):
        AutoCosts(verify=curve, draft_cost=0.0, probe_k="sometimes")


def test_when_copyable_text_ends_k_comes_down_within_five_rounds():
    """Evidence forgets at 0.8 a drafted round (tuned with scripts/auto_k_check.py --modeled): after ten rounds whose
    every draft was kept, the text stops copying (nothing kept) and k = 8 lasts five rounds, not ten (0.9 before)."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.002, prior=(0.5,), round_cost=0.002)
    ev, ks = evidence_of([(8, 8)] * 10, costs), []
    for _ in range(12):
        k = choose_k(costs, ev, 1, 8).k
        ks.append(k)
        ev = observe(costs, ev, k, 0, k)
    assert ks.count(8) == 5 and ks[5] < 8, ks


def test_the_first_round_probe_can_be_turned_off():
    """probe_first=False (c0551ae): no evidence and a prior that does not pay give plain passes until probe_every."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.02, prior=(0.15,), probe_first=False, probe_every=4)
    ev = Evidence()
    ks = []
    for _ in range(5):
        k = choose_k(costs, ev, 1, 8).k
        ks.append(k)
        ev = observe(costs, ev, k, 0, k)
    assert ks == [0, 0, 0, 0, 1], ks


def test_copy_text_after_a_probe_still_climbs_to_a_long_k():
    """The copy-text win survives the smaller probe: once a k = 1 probe is kept and the text keeps copying, k grows."""
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.002, prior=(0.15,), round_cost=0.002)
    ev, ks = observe(costs, Evidence(), 1, 0, 1), []
    for _ in range(40):
        k = choose_k(costs, ev, 1, 8).k
        ks.append(k)
        ev = observe(costs, ev, k, k, k)  # copyable: every draft kept
    assert ks[-1] == 8 and ks.index(8) < 20, ks


def test_the_reason_reads_as_one_sentence():
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.05, prior=(0.81, 0.62, 0.44, 0.3))
    choice = choose_k(costs, Evidence(), 1, 8)
    text = choice.sentence()
    assert text.startswith(f"k = {choice.k}: acceptance by position 0.81 / 0.62")
    assert f"verify of {choice.k + 1} costs" in text and "drafting 0.05 a token" in text and f"k = {choice.next_k} would give" in text
    assert choose_k(AutoCosts(verify=2.0, draft_cost=1.0), Evidence(), 1, 4).sentence().startswith("k = 0 (a plain pass)")


def test_the_decoder_records_why_and_respects_the_ceiling_and_the_length_limit():
    costs = AutoCosts(verify=1.1, draft_cost=0.0, prior=(0.9,))
    config = DecodeConfig(max_new_tokens=30, max_draft_tokens=5, auto=costs)
    dec = SpeculativeDecoder(BigramLM(), NGramDrafter(10, threshold=0.0), [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], config)
    dec.run()
    for r in dec.records:
        assert r.k_choice is not None and r.k_choice.k == r.num_draft_tokens <= 5
    assert sum(len(r.emitted) for r in dec.records) == 30
    fixed = SpeculativeDecoder(BigramLM(), NGramDrafter(10), [1, 2, 3], DecodeConfig(max_new_tokens=5))
    assert all(r.k_choice is None for r in fixed.run())  # fixed k: no reason to record
    with pytest.raises(ValueError, match="auto k or adaptive k"):
        DecodeConfig(adaptive_k=True, auto=costs)


@pytest.mark.parametrize("draft_cost", [0.0, 0.05, 0.4, 3.0])
@pytest.mark.parametrize("make", [lambda: NGramDrafter(10, threshold=0.0), lambda: PromptLookupDrafter()])
def test_greedy_with_auto_equals_plain_greedy(draft_cost, make):
    prompt, lm = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5, 1, 2], BigramLM()
    config = DecodeConfig(max_new_tokens=60, auto=AutoCosts(verify=CPU_LIKE, draft_cost=draft_cost, probe_every=3))
    dec = SpeculativeDecoder(lm, make(), prompt, config)
    dec.run()
    assert dec.generated == plain_greedy(BigramLM(), prompt, 60)
    if draft_cost == 3.0:
        assert {r.num_draft_tokens for r in dec.records} == {0}  # no probes: no k could pay even if every draft were kept
    if draft_cost == 0.0:
        assert len({r.num_draft_tokens for r in dec.records}) > 1  # k moved with the evidence


def _sampling_run(seed: int, peek: bool) -> SpeculativeDecoder:
    sampling = SamplingConfig(temperature=1.0)
    costs = AutoCosts(verify=1.0, draft_cost=0.05, prior=(0.6,), probe_every=1)
    config = DecodeConfig(sampling=sampling, seed=seed, max_new_tokens=3, max_draft_tokens=3, auto=None if peek else costs, num_draft_tokens=2)
    dec = SpeculativeDecoder(TableLM(0, scale=0.3), ModelDrafter(TableLM(0, noise=2.0, scale=0.3), sampling), PROMPT, config)
    while not dec.done:
        saved = dec.state()
        record = dec.step()
        if peek and "rejected" in record.draft_fates:  # known-bad: k chosen from the round's own outcome
            dec.restore(saved)
            dec.k = 0
            dec.step()
            dec.k = 2
    return dec


@pytest.mark.parametrize("peek", [False, True])
def test_sampled_tokens_with_auto_follow_the_target(peek):
    result = first_two_tokens(TableLM(0, scale=0.3), PROMPT, 1.0, 1_500, lambda seed: _sampling_run(seed, peek))
    assert_first_two(result, exact=not peek)


# --- the field, the flag, the costs a run is priced with, and a real model ------------------------------------------


def test_auto_is_the_default_and_fixed_and_adaptive_stay_selectable():
    from specviz.cli import build_parser
    from specviz.cli.options import config_from_args
    from specviz.config import RunConfig

    def cli(*argv: str) -> RunConfig:
        return config_from_args(build_parser().parse_args(["generate", "--prompt", "hi", *argv]))

    assert RunConfig().k_policy == cli().k_policy == "auto" and cli().k_words == "k: auto"
    assert cli("--fixed-k", "-k", "3").k_policy == "fixed" and cli("--fixed-k", "-k", "3").k_words == "k = 3"
    assert cli("--adaptive-k").k_policy == "adaptive"  # the adaptive rule takes auto's place when asked for
    assert RunConfig(drafter="none").k_policy == "none"
    assert RunConfig(num_draft_tokens=4, max_draft_tokens=8).k_ceiling == 8 and RunConfig(num_draft_tokens=4, auto_k=False).k_ceiling == 4
    serve = build_parser().parse_args(["serve", "--fixed-k"])
    assert serve.fixed_k and not build_parser().parse_args(["serve"]).fixed_k


def test_a_run_is_priced_with_the_machines_profile_and_the_drafters_prior(tiny_models, tmp_path, monkeypatch):
    import json

    from specviz.config import RunConfig
    from specviz.core.profile import load_profile
    from specviz.drafters.specs import PRIOR_ACCEPTANCE
    from specviz.runs import ASSETS, PROFILE_ENV, RunModels, auto_costs, build_decoder

    target = tiny_models["llama"]  # float32 on the CPU
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    costs = auto_costs(RunConfig(drafter="lookup"), target)
    shipped = load_profile(ASSETS / "profile_cpu_float32.json")
    assert costs.draft_cost == shipped.draft_cost["lookup"] and costs.prior == (PRIOR_ACCEPTANCE["lookup"],)
    assert "shipped" in costs.source and all(b >= a for a, b in zip(costs.verify.costs, costs.verify.costs[1:]))  # no dip to chase
    mine = json.loads((ASSETS / "profile_cpu.json").read_text())
    mine["draft_ms_per_token"]["lookup"] = mine["pass_ms"][0] * 0.5
    (tmp_path / "here.json").write_text(json.dumps(mine))
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "here.json"))
    measured = auto_costs(RunConfig(drafter="lookup"), target)
    assert measured.draft_cost == 0.5 and "measured here" in measured.source
    medusa = auto_costs(RunConfig(drafter="medusa", draft_vocab=8192), target)
    assert medusa.draft_cost == load_profile(tmp_path / "here.json").draft_cost["medusa@8192"]  # the draft vocabulary's cost
    assert build_decoder(RunConfig(drafter="lookup", auto_k=False), RunModels(target), [1, 2, 3]).config.auto is None
    assert build_decoder(RunConfig(drafter="lookup"), RunModels(target), [1, 2, 3], baseline=True).config.auto is None


def test_a_profile_saved_by_profile_save_prices_auto_on_this_machine(tiny_models, tiny_dir, tmp_path, monkeypatch, capsys):
    import itertools
    import json

    from specviz.cli import main
    from specviz.config import RunConfig
    from specviz.core.profile import load_profile
    from specviz.runs import ASSETS, PROFILE_ENV, auto_costs, saved_profile_path

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    target = tiny_models["llama"]
    assert "shipped" in auto_costs(RunConfig(drafter="lookup"), target).source  # nothing saved yet
    args = ["profile", "--target", str(tiny_dir["llama"]), "--dtype", "float32", "--max-tokens", "3", "--context", "8", "--repeats", "1"]
    assert main(args) == 0 and not saved_profile_path(target).exists()  # measuring alone keeps nothing
    assert main([*args, "--save"]) == 0
    saved = saved_profile_path(target)
    assert saved.parent == tmp_path / "cache" / "profiles" and "saved" in capsys.readouterr().err
    costs = auto_costs(RunConfig(drafter="lookup"), target)
    assert "profile --save" in costs.source and costs.draft_cost == load_profile(saved).draft_cost["lookup"]
    assert costs.verify.costs[:3] == tuple(itertools.accumulate(load_profile(saved).curve.costs[:3], max))
    assert "shipped" in auto_costs(RunConfig(drafter="lookup"), tiny_models["gpt2"]).source  # another target: not its profile
    monkeypatch.setenv(PROFILE_ENV, str(ASSETS / "profile_cpu.json"))  # $SPECVIZ_PROFILE still comes first
    assert "measured here)" in auto_costs(RunConfig(drafter="lookup"), target).source
    monkeypatch.delenv(PROFILE_ENV)
    saved.write_text(json.dumps({"schema": "not a profile"}))  # a broken file: passed over, with a warning
    assert "shipped" in auto_costs(RunConfig(drafter="lookup"), target).source


def test_greedy_with_auto_through_build_decoder_equals_plain_on_a_tiny_model(tiny_models):
    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder

    target = tiny_models["llama"]
    prompt_ids = target.tokenizer("one two three four one two three four one two three")["input_ids"]
    config = RunConfig(target="tiny", drafter="ngram", ngram_threshold=0.0, max_new_tokens=30, chat=False)
    decoder = build_decoder(config, RunModels(target), prompt_ids)
    decoder.run()
    assert decoder.config.auto is not None and all(r.k_choice is not None for r in decoder.records)
    baseline = build_decoder(config, RunModels(target), prompt_ids, baseline=True)
    baseline.run()
    assert decoder.generated == baseline.generated


def test_the_inspector_says_why_in_one_escaped_sentence():
    from specviz.ui.step_through.inspector import k_note

    dec = SpeculativeDecoder(BigramLM(), NGramDrafter(10), [1, 2, 3, 1, 2], DecodeConfig(max_new_tokens=6, auto=AutoCosts(verify=1.1, draft_cost=0.0)))
    record = dec.step()
    assert k_note(record).startswith(f"k = {record.num_draft_tokens}") and "tokens per pass" in k_note(record)
    assert k_note(SpeculativeDecoder(BigramLM(), NGramDrafter(10), [1, 2, 3], DecodeConfig(max_new_tokens=3)).step()) is None


def test_a_recording_from_before_auto_k_reads_as_the_k_it_drafted():
    from pathlib import Path

    from specviz.recording.load import read_recording

    shipped = Path(__file__).resolve().parents[1] / "assets" / "recordings"
    adaptive = read_recording(shipped / "code-lookup-adaptive-k.json").runs[0]
    fixed = read_recording(shipped / "copy-ngram-greedy.json").runs[0]
    assert adaptive.config.k_policy == "adaptive" and fixed.config.k_policy == "fixed"
    assert all(r.k_choice is None for r in fixed.records)


def test_the_page_runs_auto_by_default_and_the_inspector_says_why(local):  # noqa: F811
    from tests.test_app_compare_tree import STATE, click, step_page

    at = step_page(local, drafter="lookup")
    assert at.toggle(key="auto_k").value is True
    click(at, "step")
    run = at.session_state[STATE].session.runs[0]
    assert run.config.k_policy == "auto" and run.records[0].k_choice is not None
    assert any("tokens per pass-equivalent" in c.value for c in at.caption), [c.value for c in at.caption]
    at.toggle(key="auto_k").set_value(False).run()
    assert any("auto_k: True → False" in w.value for w in at.warning), [w.value for w in at.warning]  # offered a reset
    click(at, "reset")
    click(at, "step")  # a new run at the slider's k
    fixed = at.session_state[STATE].session.runs[0]
    assert fixed.config.k_policy == "fixed" and all(r.k_choice is None for r in fixed.records)


@pytest.mark.parametrize("bad, message", [
    (dict(verify=0.0, draft_cost=0.1), "verify cost"), (dict(verify=1.0, draft_cost=float("nan")), "drafting cost"),
    (dict(verify=1.0, draft_cost=0.1, prior=(1.5,)), "prior acceptance"), (dict(verify=1.0, draft_cost=0.1, decay=0.0), "decay"),
    (dict(verify=1.0, draft_cost=0.1, plain_decay=1.5), "plain_decay"),
    (dict(verify=1.0, draft_cost=0.1, longer_within=1.0), "longer_within"),
])  # fmt: skip
def test_bad_costs_are_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        AutoCosts(**bad)


def test_the_round_costs_are_what_the_shipped_drafting_table_gives():
    """runs.DRAFT_ROUND_COST is the median over assets/drafting_cpu.json's chain rows of (drafting per round - k * the
    shipped profile's c per token), per drafter and draft vocabulary, to two significant figures, and at least 0."""
    import json
    import re
    import statistics

    from specviz.runs import ASSETS, DRAFT_ROUND_COST

    c = json.loads((ASSETS / "profile_cpu.json").read_text())["draft_cost"]
    excess: dict[str, list[float]] = {}
    for row in json.loads((ASSETS / "drafting_cpu.json").read_text())["rows"]:
        m = re.fullmatch(r"(n-gram|medusa|recycle|eagle)(?: chain)? k=(\d+)( V'=8k)?", row["setup"])
        if m:
            key = {"n-gram": "ngram"}.get(m[1], m[1]) + ("@8192" if m[3] else "")
            excess.setdefault(key, []).append(row["draft"] - int(m[2]) * c[key])
    derived = {key: max(0.0, statistics.median(v)) for key, v in excess.items()}
    assert set(derived) | {"lookup"} == set(DRAFT_ROUND_COST)
    for key, r in derived.items():
        assert DRAFT_ROUND_COST[key] == pytest.approx(r, rel=0.1, abs=0.001), key


def test_the_round_by_round_figure_builds_from_the_shipped_trace():
    """assets/auto_k_rounds_cpu.json (scripts/auto_k_check.py --trace) draws on the Benchmark page: a panel per run, the
    k line and the kept-drafts bars; on the copying prompt the n-gram model's k climbs past its first choice; a file of
    another kind is a clear error."""
    import json

    from specviz.ui.labs.benchmark import AUTO_K_ROUNDS
    from specviz.viz.bench import auto_k_rounds_figure, auto_k_rounds_frame

    frame = auto_k_rounds_frame(json.loads(AUTO_K_ROUNDS.read_text(encoding="utf-8")))
    assert set(frame["category"]) == {"prose", "copy"} and (frame["accepted"] <= frame["drafted"]).all()
    copy = frame[(frame["drafter"] == "ngram") & (frame["category"] == "copy")]
    assert copy["k"].max() > copy["k"].iloc[0]
    fig = auto_k_rounds_figure(frame)
    runs = frame["run"].nunique()
    assert len([t for t in fig.data if t.type == "bar"]) == runs and len(fig.layout.annotations) == runs
    assert {t.name for t in fig.data} == {"drafts kept", "k auto chose", "a probe"}
    with pytest.raises(ValueError, match="Not a k: auto trace"):
        auto_k_rounds_frame({"schema": "specviz.profile/1"})


def test_the_benchmark_page_draws_auto_round_by_round():
    from tests.test_app_pages import page

    at = page("benchmark.py").run()
    assert not at.exception
    assert any("k: auto round by round on one prose and one copying prompt" in c.value for c in at.caption)
    assert any(s.value == "k: auto, round by round" for s in at.subheader)


def test_the_modeled_check_charges_rounds_and_reads_variants():
    """scripts/auto_k_check.py --modeled: a round costs c_verify(drafted) + drafted*c + r (a plain round 1), and
    --variant names AutoCosts overrides over the current defaults or a preset (old: c0551ae)."""
    import runpy
    from pathlib import Path

    check = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "auto_k_check.py"), run_name="auto_k_check")
    costs = AutoCosts(verify=VerifyCurve((1.0, 1.2, 1.3)), draft_cost=0.1, round_cost=0.05)
    assert check["round_cost"](costs, 0) == 1.0 and check["round_cost"](costs, 2) == pytest.approx(1.3 + 0.2 + 0.05)
    # a run's first round: plain, its token comes from the prefill's row; drafted, the pass feeds the drafts alone
    assert check["round_cost"](costs, 0, True) == 0.0 and check["round_cost"](costs, 2, True) == pytest.approx(1.2 + 0.2 + 0.05)
    name, old = check["parse_variant"]("old+margin=0.02")
    assert name == "old+margin=0.02" and old["margin"] == 0.02 and old["probe_k"] == "prior" and old["decay"] == 0.9
    assert check["parse_variant"]("probe_every=4,probe_k=best,probe_first=false")[1] == {
        "probe_every": 4,
        "probe_k": "best",
        "probe_first": False,
    }
    AutoCosts(verify=1.2, draft_cost=0.0, **old)  # every preset field is an AutoCosts field
    for preset in check["PRESETS"].values():
        AutoCosts(verify=1.2, draft_cost=0.0, **preset)


def test_sampled_cells_are_measured_over_several_texts():
    """At T > 0 a setup's text depends on its k (texts part at the first rejection), so one seed compares different
    texts and the best of four fixed ks is the luckiest draw: the timed check runs every setup once per seed of
    --seeds (the warm-up on the first only), and the modeled one takes each setup's median over the seeds before
    choosing a prompt's best fixed k. Greedy cells keep --repeats runs of their one text."""
    import runpy
    from pathlib import Path
    from types import SimpleNamespace

    check = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "auto_k_check.py"), run_name="auto_k_check")
    calls = []
    names = ("plain", "auto", "k=1")

    def fake_setups(models, drafter, ids, temperature, ks, variants=None, seed=None, profiles=None):
        return {name: seed for name in names}

    def fake_measure(factories, repeats, warmup):
        calls.append((next(iter(factories.values())), repeats, warmup))
        return {name: [SimpleNamespace(seed=seed)] * repeats for name, seed in factories.items()}

    check["timed_cell"].__globals__.update(setups=fake_setups, measure_setups=fake_measure)
    args = SimpleNamespace(ks=[1], repeats=3, warmup=1, seeds=4, profile=None)
    sampled = check["timed_cell"](None, "ngram", [1], 0.7, args)
    assert calls == [(0, 1, 1), (1, 1, 0), (2, 1, 0), (3, 1, 0)]
    assert [s.seed for s in sampled["auto"]] == [0, 1, 2, 3] and set(sampled) == set(names)
    calls.clear()
    greedy = check["timed_cell"](None, "ngram", [1], 0.0, args)
    assert calls == [(None, 3, 1)] and len(greedy["plain"]) == 3
    per_seed = [{"plain": {"speed": 1.0}, "k=8": {"speed": s}} for s in (4.0, 1.0, 2.0)]
    assert check["over_texts"](per_seed) == {"plain": {"speed": 1.0}, "k=8": {"speed": 2.0}}


def test_the_replay_is_the_run_itself_at_temperature_0_and_pairs_the_texts_when_sampled():
    """--replay: every setup replays the text plain decoding drew, keeping drafts while they equal it. Greedy, that is
    each setup's own run (the engine's rounds, charged the same modeled time); sampled, every setup meets plain
    decoding's text, so auto and each fixed k are compared on the same texts."""
    import runpy
    from pathlib import Path

    check = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "auto_k_check.py"), run_name="auto_k_check")
    costs = AutoCosts(verify=CPU_LIKE, draft_cost=0.0, prior=(0.5,))
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]

    def factories(sampling: SamplingConfig) -> dict:
        def make(k: int, auto: AutoCosts | None = None):
            config = DecodeConfig(num_draft_tokens=k, sampling=sampling, seed=3, max_new_tokens=30, auto=auto, max_draft_tokens=8)
            return lambda: SpeculativeDecoder(BigramLM(sharpness=0.5), PromptLookupDrafter(3), prompt, config)

        return {"plain": make(0), "auto": make(4, costs), "k=2": make(2), "k=8": make(8)}

    greedy = factories(SamplingConfig())
    replayed, engine = check["replayed_runs"](greedy, costs), check["modeled_runs"](greedy, costs)
    for name in ("auto", "k=2", "k=8"):
        assert replayed[name]["passes"] == pytest.approx(engine[name]["passes"]), name
        assert replayed[name]["rounds"] == engine[name]["rounds"] and replayed[name]["generated"] == engine[name]["generated"]
    assert any(engine[n]["drafted_rounds"] for n in ("auto", "k=2", "k=8"))  # the text is copyable: drafts were kept
    sampled = check["replayed_runs"](factories(SamplingConfig(temperature=1.0)), costs)
    assert len({run["generated"] for run in sampled.values()}) == 1  # one text for every setup
    assert sampled["plain"]["passes"] == len(sampled["plain"]["generated"]) - 1  # the first token: the prefill's
    assert all(run["passes"] > 0 for run in sampled.values())


def test_the_timed_check_records_autos_tokens_per_target_pass():
    """Each timed cell carries auto's tokens per target pass (the median over its prompts), the ceiling of an honest
    speedup: a cell whose auto / plain is above it drifted."""
    import runpy
    from pathlib import Path
    from types import SimpleNamespace

    check = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "auto_k_check.py"), run_name="auto_k_check")

    def runs(speed: float, per_pass: float | None = 1.0):
        return [SimpleNamespace(tokens_per_s=speed, stats=SimpleNamespace(tokens_per_target_pass=per_pass))] * 3

    prompt = {"plain": runs(10.0), "auto": runs(13.0, 1.5), "k=1": runs(12.0, 1.4), "k=2": runs(14.0, 1.8)}
    row = check["cell_row"]("ngram", "code", 0.0, [prompt, {**prompt, "auto": runs(11.0, 1.1)}])
    assert row["auto_tokens_per_target_pass"] == pytest.approx(1.3) and row["best_fixed"] == "k=2"
    assert row["auto_vs_plain"] == pytest.approx(1.2) and row["best_fixed_vs_plain"] == pytest.approx(1.4)
