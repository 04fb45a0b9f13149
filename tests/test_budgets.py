"""Token and memory budgets (issue 32, items 1 and 4), without Streamlit: the owner's settings, the one prompt check
(specviz.runs.prompt_ids), prefills in chunks that let a waiting turn in, the KV-cache accountant
(specviz.workshop.budgets), a run's worst-case cache, the exactness lab computing only the logits it uses, and the
sessions-per-address count. The pages' messages are tests/test_app_budgets.py; a real server, tests/browser/test_budgets_server.py."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from specviz.config import MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS, RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import pausable, pause_point, paused_s
from specviz.drafters import NoDrafter
from specviz.models import HFCachedLM
from specviz.runs import RunModels, check_prompt_tokens, kv_tokens, prompt_ids, run_positions
from specviz.workshop.budgets import MEMORY_SHARE_ENV, KVBudget, OverBudget, default_kv_tokens, memory_limit, memory_share
from specviz.workshop.policy import Policy, load_policy
from specviz.workshop.queues import ModelQueue
from specviz.workshop.sessions import SessionRegistry
from tests.service_helpers import wait_until

WORDS = "the quick brown fox jumps over the lazy dog".split()


def words(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


# --- the owner's settings ----------------------------------------------------------------------------------------


def test_the_budgets_have_shared_and_local_defaults():
    shared, local = load_policy(env={}, server_address="0.0.0.0"), load_policy(env={}, server_address="localhost")
    assert shared.max_prompt_tokens == 1_024 and local.max_prompt_tokens == MAX_PROMPT_TOKENS
    assert shared.max_kv_tokens == local.max_kv_tokens == 0  # sized from the machine in both modes
    assert shared.max_sessions_per_client == 100 and local.max_sessions_per_client == 0  # the laptop: no cap


def test_the_owner_sets_the_budgets():
    env = {"SPECVIZ_MAX_PROMPT_TOKENS": "300", "SPECVIZ_MAX_KV_TOKENS": "50000", "SPECVIZ_MAX_SESSIONS_PER_CLIENT": "0"}
    policy = load_policy(env=env, server_address="0.0.0.0")
    assert (policy.max_prompt_tokens, policy.max_kv_tokens, policy.max_sessions_per_client) == (300, 50_000, 0)
    secrets = {"max_prompt_tokens": 200, "max_kv_tokens": 9_000, "max_sessions_per_client": 4}
    policy = load_policy(secrets=secrets, server_address="0.0.0.0")
    assert (policy.max_prompt_tokens, policy.max_kv_tokens, policy.max_sessions_per_client) == (200, 9_000, 4)


@pytest.mark.parametrize(
    "env, words_",
    [
        ({"SPECVIZ_MAX_PROMPT_TOKENS": "0"}, "SPECVIZ_MAX_PROMPT_TOKENS.*between 1"),
        ({"SPECVIZ_MAX_PROMPT_TOKENS": str(MAX_PROMPT_TOKENS + 1)}, "SPECVIZ_MAX_PROMPT_TOKENS"),
        ({"SPECVIZ_MAX_PROMPT_TOKENS": "many"}, "SPECVIZ_MAX_PROMPT_TOKENS.*number"),
        ({"SPECVIZ_MAX_KV_TOKENS": "-1"}, "SPECVIZ_MAX_KV_TOKENS.*between 0"),
        ({"SPECVIZ_MAX_KV_TOKENS": "1e12"}, "SPECVIZ_MAX_KV_TOKENS"),
        ({"SPECVIZ_MAX_SESSIONS_PER_CLIENT": "-5"}, "SPECVIZ_MAX_SESSIONS_PER_CLIENT"),
        ({"SPECVIZ_MAX_SESSIONS_PER_CLIENT": "ten"}, "SPECVIZ_MAX_SESSIONS_PER_CLIENT"),
    ],
)
def test_bad_budget_settings_say_which_one(env, words_):
    with pytest.raises(ValueError, match=words_):
        load_policy(env=env, server_address="0.0.0.0")


def test_every_setting_is_documented():
    """One table of settings (policy.OWNER_SETTINGS); docs/workshop.md names every one (tests/test_policy.py checks
    its rows, defaults included)."""
    from pathlib import Path

    import specviz.workshop.policy as policy

    docs = (Path(__file__).resolve().parents[1] / "docs" / "workshop.md").read_text()
    missing = [r.env for r in policy.OWNER_SETTINGS if f"`{r.env}`" not in docs]
    assert not missing, missing


# --- one check for every prompt -----------------------------------------------------------------------------------


def test_a_prompt_over_the_token_budget_is_refused_naming_the_limit_and_the_count(tiny_models):
    target = tiny_models["llama"]  # a word-level tokenizer: one token a word, no chat template
    assert len(prompt_ids(target, words(12), True, max_new_tokens=8, max_prompt_tokens=12)) == 12
    with pytest.raises(ValueError, match=r"^Your prompt is 13 tokens; this server allows 12\. Shorten it\.$"):
        prompt_ids(target, words(13), True, max_new_tokens=8, max_prompt_tokens=12)


def test_the_prompt_and_the_run_must_fit_the_models_context(tiny_models):
    target = tiny_models["llama"]
    assert target.context_length == 256
    ids = prompt_ids(target, words(20), False, max_new_tokens=227, num_draft_tokens=8)  # 20 + 227 + 9 = 256: fits
    assert len(ids) == 20 and run_positions(20, 227, 8) == 256
    with pytest.raises(ValueError, match=r"\(20 tokens\) plus max new tokens \(228\).*257 positions; the model's context is 256"):
        prompt_ids(target, words(20), False, max_new_tokens=228, num_draft_tokens=8)
    with pytest.raises(ValueError, match="context is 256"):  # a saved run's ids, checked alike
        check_prompt_tokens(target, 300, 1)


def test_a_huge_paste_never_reaches_the_tokenizer(tiny_models):
    """The character cap is the cheap check before the tokenizer: 20 MB of text is refused without encoding it."""
    target = tiny_models["llama"]

    class Refuse:
        chat_template = None

        def __call__(self, *args, **kwargs):
            raise AssertionError("the tokenizer saw the paste")

    class Target:
        tokenizer, context_length = Refuse(), target.context_length

    with pytest.raises(ValueError, match=f"characters; the limit is {MAX_PROMPT_CHARS:,}"):
        prompt_ids(Target(), "x" * 20_000_000, True, max_new_tokens=8, max_prompt_tokens=1_024)  # type: ignore[arg-type]


@pytest.mark.smollm
def test_one_character_can_be_four_tokens_and_the_budget_counts_tokens(smollm):
    """The issue's example: U+10380 is 4 tokens in the embedded tokenizer, so 300 of them pass a 2,000-character cap
    and are refused by the 1,024-token budget (counted with the chat template, the ids the run would prefill)."""
    prompt = "\U00010380" * 300
    assert len(prompt) < Policy().max_prompt_chars
    with pytest.raises(ValueError, match=r"Your prompt is 1,2\d\d tokens; this server allows 1,024\. Shorten it\."):
        prompt_ids(smollm, prompt, True, max_new_tokens=256, num_draft_tokens=8, max_prompt_tokens=Policy().max_prompt_tokens)
    assert smollm.context_length == 8_192 and smollm.kv_bytes_per_token == 46_080  # 30 x 2 x 3 x 64 x 4 bytes


# --- a long prefill in chunks ------------------------------------------------------------------------------------


def test_a_chunked_prefill_equals_one_pass(tiny_models):
    """Chunk by chunk, the cache and the last row are a one-pass prefill's up to float32 rounding (the attention
    over cached chunks sums in another order), and greedy decoding after either is the same, token for token."""
    target = tiny_models["llama"]
    ids = torch.randint(4, target.vocab_size, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    whole, chunked = HFCachedLM(target.model, target.vocab_size, chunk_tokens=1_000), HFCachedLM(target.model, target.vocab_size, chunk_tokens=32)
    a, b = whole.extend(ids, last_only=True), chunked.extend(ids, last_only=True)
    assert a.shape == b.shape == (1, target.vocab_size)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert list(whole.tokens) == list(chunked.tokens) == ids
    for x, y in zip(whole.cache.layers, chunked.cache.layers):
        torch.testing.assert_close(x.keys, y.keys, rtol=0, atol=1e-5)
        torch.testing.assert_close(x.values, y.values, rtol=0, atol=1e-5)
    config = DecodeConfig(num_draft_tokens=0, max_new_tokens=24)
    outputs = []
    for chunk in (1_000, 32, 7):
        decoder = SpeculativeDecoder(HFCachedLM(target.model, target.vocab_size, chunk_tokens=chunk), NoDrafter(), ids, config)
        outputs.append(decoder.run() and decoder.generated)
    assert outputs[0] == outputs[1] == outputs[2]


def test_a_chunked_prefill_keeps_the_last_hidden_row(tiny_models):
    """Medusa reads the prefill's last hidden row, EAGLE every row: chunks keep every chunk's rows, as one pass does."""
    target = tiny_models["llama"]
    ids = [4 + i % (target.vocab_size - 4) for i in range(100)]
    whole = HFCachedLM(target.model, target.vocab_size, keep_hidden=True, chunk_tokens=1_000)
    chunked = HFCachedLM(target.model, target.vocab_size, keep_hidden=True, chunk_tokens=16)
    whole.extend(ids, last_only=True), chunked.extend(ids, last_only=True)
    assert chunked.last_hidden.shape == whole.last_hidden.shape == (len(ids), target.model.config.hidden_size)
    torch.testing.assert_close(whole.last_hidden, chunked.last_hidden, rtol=0, atol=1e-5)


def test_pause_points_come_between_chunks_and_their_waits_are_not_the_prefills_time(tiny_models):
    target = tiny_models["llama"]
    calls = []

    def pause() -> float:
        calls.append(len(lm.tokens))
        return 0.25  # as if it had waited a quarter second for other turns

    lm = HFCachedLM(target.model, target.vocab_size, chunk_tokens=16)
    assert pause_point() == 0.0  # outside a turn: nothing
    with pausable(pause):
        lm.extend(list(range(4, 54)), last_only=True)  # 50 ids: chunks of 16, 16, 16, 2
        assert calls == [16, 32, 48] and paused_s() == 0.75
        lm.extend(list(range(4, 54)))  # a verify pass (all rows) is one pass, never paused
        assert calls == [16, 32, 48]
    with pausable(pause):
        clock = time.perf_counter()
        decoder = SpeculativeDecoder(HFCachedLM(target.model, target.vocab_size, chunk_tokens=16), NoDrafter(), list(range(4, 54)), DecodeConfig(num_draft_tokens=0))
        elapsed_ms = (time.perf_counter() - clock) * 1000
    assert decoder.prefill_ms <= elapsed_ms - 3 * 250 + 1  # the three pauses' 0.75 s are left out of the prefill's time


def test_a_step_gets_in_between_two_chunks_of_another_sessions_prefill(tiny_models, monkeypatch):
    """The issue's 46 s Step: a participant's long prefill held the model in one turn. Now a Step queued behind it runs
    at the prefill's next pause point, before the prefill ends (gated on events, no timing). Known-bad control: the
    same with one-pass prefills (no chunks) runs the Step after the prefill."""
    import specviz.models.adapter as adapter
    from specviz.runs import build_decoder

    target = tiny_models["llama"]
    config = RunConfig(target=target.name, drafter="lookup", num_draft_tokens=2, auto_k=False, max_new_tokens=4, chat=False)
    ids = [4 + i % (target.vocab_size - 4) for i in range(200)]

    def race(chunk: int) -> list[str]:
        monkeypatch.setattr(adapter, "PREFILL_CHUNK_TOKENS", chunk)
        queue, order, at_pause = ModelQueue("m"), [], threading.Event()

        def prefill():
            with queue.held_turn(poll_s=0.01) as held:

                def pause() -> float:
                    if not at_pause.is_set():  # the first pause point: wait until the Step has joined the line
                        at_pause.set()
                        wait_until(lambda: queue.waiting == 1)
                    return held.pass_on()

                with pausable(pause):
                    build_decoder(config, RunModels(target), ids)
                order.append("prefill done")

        def step():
            with queue.turn(poll_s=0.01):
                order.append("step")

        first = threading.Thread(target=prefill)
        first.start()
        wait_until(lambda: queue.in_flight == 1)
        at_pause.wait(30) if chunk < len(ids) else None
        second = threading.Thread(target=step)
        second.start()
        first.join(60), second.join(60)
        assert queue.in_flight == 0 and queue.waiting == 0
        return order

    assert race(32) == ["step", "prefill done"]
    assert race(10_000) == ["prefill done", "step"]  # known-bad: one pass holds the model to the end


def test_passing_a_turn_on_keeps_the_queue_consistent():
    queue = ModelQueue("m")
    with queue.held_turn() as held:
        assert held.pass_on() == 0.0 and held.passed == 0  # nobody waits: the turn is kept
    assert queue.in_flight == 0

    def stop(ahead, waited):
        raise RuntimeError("the page reran")

    gate, inside = threading.Event(), threading.Event()

    def other():
        with queue.turn(poll_s=0.01):
            inside.set()
            gate.wait(10)

    t = threading.Thread(target=other)
    with pytest.raises(RuntimeError, match="reran"):
        with queue.held_turn(on_wait=stop, poll_s=0.01) as held:
            t.start()
            wait_until(lambda: queue.waiting == 1)
            held.pass_on()  # the other turn goes first; waiting to come back, on_wait raises
    inside.wait(10)
    assert queue.in_flight == 1  # only the other turn holds the model: nothing was given back twice
    gate.set()
    t.join(10)
    assert queue.in_flight == 0 and queue.waiting == 0
    with queue.turn(timeout_s=1):
        pass


def test_a_background_prefill_yields_to_a_waiting_step_only():
    queue = ModelQueue("m")
    with queue.held_turn(background=True) as held:
        t = threading.Thread(target=lambda: queue.turn(background=True, poll_s=0.01).__enter__())
        # another background waiter is not a reason to give way: the turn is kept
        assert held.pass_on() == 0.0
        seen = []

        def step():
            with queue.turn(poll_s=0.01):
                seen.append(held.held)

        s = threading.Thread(target=step)
        s.start()
        wait_until(lambda: queue.waiting == 1)
        held.pass_on()
        s.join(10)
        assert seen == [False] and held.held and held.passed == 1
    del t
    assert queue.in_flight == 0


# --- the KV-cache accountant ---------------------------------------------------------------------------------------


def test_reservations_fit_the_budget_and_say_the_numbers_when_not():
    budget = KVBudget()
    a = budget.reserve(("alice", "step-through"), 600, limit=1_000)
    with pytest.raises(OverBudget, match=r"needs 500 tokens of KV cache and 400 of its 1,000 are free"):
        budget.reserve(("bob", "step-through"), 500, limit=1_000)
    with pytest.raises(OverBudget, match=r"needs 1,001 tokens.*more than this server's memory budget of 1,000"):
        budget.reserve(("bob", "step-through"), 1_001, limit=1_000)
    assert budget.in_use == 600 and len(budget) == 1  # a refusal holds nothing
    b = budget.reserve(("bob", "step-through"), 400, limit=1_000)
    assert budget.in_use == 1_000
    a.release(), a.release()  # idempotent
    assert budget.in_use == 400 and not a.held and b.held


def test_a_new_run_replaces_the_old_one_in_its_slot():
    """A participant at the budget can always start over: the slot's own reservations are not counted against the new
    one (the caller releases the old once the new run exists)."""
    budget = KVBudget()
    old = budget.reserve(("alice", "step-through"), 900, limit=1_000)
    new = budget.reserve(("alice", "step-through"), 950, limit=1_000)
    assert budget.in_use == 1_850 and old.held and new.held
    with pytest.raises(OverBudget):
        budget.reserve(("bob", "job"), 10, limit=1_000)
    old.release()
    assert budget.in_use == 950
    job = budget.reserve(("alice", "job"), 50, limit=1_000)
    assert budget.release_session("alice") == 2 and budget.in_use == 0 and not job.held and not new.held


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def hog(budget: KVBudget, clock: Clock, runs: int, tokens: int, client: str = "hog") -> list:
    """One client's sessions, each holding an evictable run; returns [(reservation, evicted flag list)]."""
    out = []
    for i in range(runs):
        r = budget.reserve((f"{client}-{i}", "step-through"), tokens, limit=1_000, client=client)
        freed: list[int] = []
        r.evictable(lambda freed=freed: freed.append(1))
        out.append((r, freed))
        clock.now += 10  # each run a little older than the next
    return out


def test_one_client_with_many_sessions_cannot_keep_every_other_participant_out():
    """Five sessions of one address hold the whole budget; another address's run frees the hogs' oldest idle run (its
    page restores it from its file later) instead of being refused. Before: "memory for runs is full"."""
    clock = Clock()
    budget = KVBudget(clock=clock, idle_s=5)
    runs = hog(budget, clock, 5, 200)
    assert budget.in_use == 1_000
    mine = budget.reserve(("victim", "step-through"), 300, limit=1_000, client="victim")
    assert mine.held and budget.in_use <= 1_000
    assert [bool(freed) for _, freed in runs] == [True, True, False, False, False]  # the oldest first, only as many as needed
    assert [r.held for r, _ in runs] == [False, False, True, True, True]
    assert budget.by_client() == {"hog": 600, "victim": 300} and budget.evicted == 2


def test_a_run_in_use_and_a_job_are_never_freed_and_the_asker_past_its_share_is_refused():
    clock = Clock()
    budget = KVBudget(clock=clock, idle_s=5)
    busy = budget.reserve(("hog-0", "step-through"), 500, limit=1_000, client="hog")
    busy.evictable(lambda: None)
    job = budget.reserve(("hog-1", "job"), 500, limit=1_000, client="hog")  # a job: no on_evict
    clock.now += 10
    busy.touch()  # a Step right now
    with pytest.raises(OverBudget, match="memory for runs is full"):
        budget.reserve(("victim", "step-through"), 300, limit=1_000, client="victim")
    assert busy.held and job.held and budget.evicted == 0
    clock.now += 10  # now idle
    assert budget.reserve(("victim", "step-through"), 300, limit=1_000, client="victim").held and not busy.held and job.held
    # the victim's address asking for more than its share (1,000 / 2) while memory is full: refused, nothing freed
    with pytest.raises(OverBudget, match="fair share of 500"):
        budget.reserve(("victim-2", "step-through"), 300, limit=1_000, client="victim")
    assert job.held and budget.by_client() == {"hog": 500, "victim": 300}


def test_the_heaviest_client_gives_first_and_only_what_is_needed():
    clock = Clock()
    budget = KVBudget(clock=clock, idle_s=0)
    small = hog(budget, clock, 1, 300, client="small")  # 300
    big = hog(budget, clock, 3, 200, client="big")  # 600: the heaviest
    budget.reserve(("new", "step-through"), 300, limit=1_000, client="new")  # needs 200 freed: one run
    assert [bool(f) for _, f in big] == [True, False, False] and not small[0][1]
    budget.reserve(("newer", "step-through"), 200, limit=1_000, client="newer")  # a share is now 250
    assert [bool(f) for _, f in big] == [True, True, False]  # big (400) before small (300), though small's run is older
    assert not small[0][1] and budget.by_client() == {"small": 300, "big": 200, "new": 300, "newer": 200}


def test_with_memory_to_spare_a_client_may_pass_its_share():
    budget = KVBudget()
    for i in range(4):
        budget.reserve((f"s{i}", "step-through"), 240, limit=1_000, client="one address")
    assert budget.by_client() == {"one address": 960}  # nobody waits: nothing is refused or freed
    with pytest.raises(OverBudget, match="needs 100 tokens of KV cache and 40 of its 1,000 are free"):  # alone: no talk of shares
        budget.reserve(("s4", "step-through"), 100, limit=1_000, client="one address")


def test_the_cgroup_memory_limit(tmp_path):
    root, own = tmp_path / "cgroup", tmp_path / "self-cgroup"
    root.mkdir()
    own.write_text("0::/\n")
    assert memory_limit(root, own) is None  # no files: no limit
    (root / "memory.max").write_text("max\n")
    assert memory_limit(root, own) is None  # v2 without a limit
    (root / "memory.max").write_text("6442450944\n")
    assert memory_limit(root, own) == 6 * 2**30
    group = root / "system.slice" / "room.scope"
    group.mkdir(parents=True)
    (group / "memory.max").write_text("2147483648\n")
    own.write_text("0::/system.slice/room.scope\n")
    assert memory_limit(root, own) == 2 * 2**30  # the process's own group: the smallest limit counts
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    own.write_text("12:memory:/\n")
    assert memory_limit(v1, own) is None
    (v1 / "memory" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert memory_limit(v1, own) == 2**30
    for damage in ("", "-1", "lots", "1" * 40):
        (v1 / "memory" / "memory.limit_in_bytes").write_text(damage)
        assert memory_limit(v1, own) is None, damage
    own.write_text("0::/../../etc\n")
    assert memory_limit(tmp_path / "none", own) is None and memory_limit(tmp_path / "none", tmp_path / "missing") is None


def test_the_memory_share_setting_and_the_rooms_split():
    from specviz.workshop.replicas.balancer import RoomError
    from specviz.workshop.replicas.supervisor import replica_memory_share

    assert memory_share({}) == 0.25 and memory_share({MEMORY_SHARE_ENV: "0.5"}) == 0.5
    for bad in ("0", "-0.1", "1.5", "half", "nan"):
        with pytest.raises(ValueError, match=MEMORY_SHARE_ENV):
            memory_share({MEMORY_SHARE_ENV: bad})
    assert float(replica_memory_share({}, 4)) == pytest.approx(0.0625)  # four replicas: a quarter between them
    assert float(replica_memory_share({MEMORY_SHARE_ENV: "0.5"}, 2)) == pytest.approx(0.25)
    with pytest.raises(RoomError):
        replica_memory_share({MEMORY_SHARE_ENV: "2"}, 2)


def test_the_accountant_never_passes_its_limit_under_concurrent_reservations():
    budget, limit, held, refused = KVBudget(), 1_000, [], []
    lock, start = threading.Lock(), threading.Barrier(16)

    def participant(i: int) -> None:
        start.wait(10)
        for j in range(50):
            try:
                r = budget.reserve((f"p{i}", j), 70, limit)  # a slot each: none replaces another
            except OverBudget:
                with lock:
                    refused.append(i)
                continue
            assert budget.in_use <= limit
            with lock:
                held.append(r)
            if j % 2:
                r.release()

    threads = [threading.Thread(target=participant, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert refused and budget.in_use <= limit
    assert budget.in_use == sum(r.tokens for r in held if r.held)


def test_the_default_budget_is_a_quarter_of_the_memory():
    assert default_kv_tokens(8 * 2**30, 46_080) == 46_603  # 2 GiB of SmolLM2-135M float32 cache
    assert default_kv_tokens(10, 46_080) == 1
    with pytest.raises(ValueError):
        default_kv_tokens(2**30, 0)


# --- a run's worst case --------------------------------------------------------------------------------------------


def test_a_runs_worst_case_counts_its_drafters_own_cache(tiny_models):
    target, draft = tiny_models["llama"], tiny_models["llama_draft"]
    assert target.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # layers x (k, v) x KV heads x head dim x float32
    assert tiny_models["gpt2"].kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    base = RunConfig(target=target.name, num_draft_tokens=4, auto_k=False, max_new_tokens=30)
    positions = run_positions(20, 30, 4)
    assert kv_tokens(base, RunModels(target), 20) == positions == 55  # the n-gram model keeps no cache
    auto = RunConfig(target=target.name, num_draft_tokens=4, max_draft_tokens=6, max_new_tokens=30)  # k: auto may draft up to its ceiling
    assert kv_tokens(auto, RunModels(target), 20) == run_positions(20, 30, 6) == kv_tokens(dataclasses.replace(auto, auto_k=False, adaptive_k=True), RunModels(target), 20)
    assert kv_tokens(base, RunModels(target), 20, baseline=True) == 20 + 30 + 1
    early = RunConfig(target=target.name, drafter="early-exit", exit_layer=1, num_draft_tokens=4, auto_k=False, max_new_tokens=30)
    assert kv_tokens(early, RunModels(target), 20) == positions + -(-positions // 2)  # 1 of 2 layers
    model = RunConfig(target=target.name, draft=draft.name, drafter="model", num_draft_tokens=4, auto_k=False, max_new_tokens=30)
    assert kv_tokens(model, RunModels(target, draft), 20) == 2 * positions


# --- the exactness lab computes the logits it uses -----------------------------------------------------------------


def test_the_labs_fast_mode_runs_the_lm_head_on_the_last_position_only(tiny_models):
    """Issue 32: fast mode computed logits at every prompt position (80,000 rows for an 80,000-token prompt). Now the
    LM head sees one row per pass. Known-bad control: a pass asking for every row shows the prompt's length."""
    from specviz.experiments.lab import sample_real
    from specviz.runs import RunModels

    target = tiny_models["llama"]
    rows: list[int] = []
    hook = target.model.get_output_embeddings().register_forward_hook(lambda module, args, out: rows.append(args[0].shape[-2]))
    try:
        prompt = words(60)
        config = RunConfig(target=target.name, drafter="lookup", num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False)
        sample_real(config, RunModels(target), prompt, "fast", 100)
        assert rows and len(rows) <= 2 and set(rows) == {1}, rows  # a run's prefill keeps one row, the pass over the last token one
        rows.clear()
        HFCachedLM(target.model, target.vocab_size).extend(target.tokenizer(prompt)["input_ids"])  # the old way
        assert rows == [60]
    finally:
        hook.remove()


# --- sessions per client address ---------------------------------------------------------------------------------


def test_sessions_are_counted_per_address_and_the_cap_admits_the_known_ones():
    now = [0.0]
    registry = SessionRegistry(clock=lambda: now[0])
    for i in range(3):
        assert registry.admits(f"s{i}", "10.0.0.7", cap=3)
        registry.touch(f"s{i}", {}, "10.0.0.7")
    assert registry.sessions_of("10.0.0.7") == 3
    assert not registry.admits("s3", "10.0.0.7", cap=3)  # a fourth from the same address
    assert registry.admits("s1", "10.0.0.7", cap=3)  # a known session is always served
    assert registry.admits("t0", "10.0.0.8", cap=3) and registry.admits("s3", "10.0.0.7", cap=0)  # another address; no cap
    registry.sweep(lambda sid: sid != "s0", lambda *a: None, gone_after_s=30, idle_after_s=1e9)  # s0's tab closed
    assert registry.sessions_of("10.0.0.7") == 2 and registry.admits("s3", "10.0.0.7", cap=3)
