"""specviz serve (specviz/workshop/service/) through the official openai client, against a real uvicorn server: chat
and text completions, streamed and not, max_tokens, stop, a bad model, a prompt over the cap, the concurrency cap, a
client that disconnects mid-stream (its decode ends and nothing is left behind), and streams taking turns."""

from __future__ import annotations

import gc
import threading

import openai
import pytest

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.runs import build_decoder, resolve_models
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.server import Service
from specviz.workshop.service.text import Detokenizer, StopText
from tests.service_helpers import running, wait_until

pytestmark = pytest.mark.smollm
MODEL = EMBEDDED_TARGET
COPY = "Repeat exactly: the cat sat on the mat and the dog sat on the log."


def make_service(smollm, drafter: str = "lookup", **caps) -> Service:
    run = RunConfig(target=MODEL, drafter=drafter, num_draft_tokens=4, dtype="float32", device="cpu")
    return Service(ServiceConfig(run, MODEL, **caps), resolve_models(run, target=smollm))


@pytest.fixture(scope="module")
def service(smollm):
    return make_service(smollm, max_prompt_tokens=200, max_tokens=48)


@pytest.fixture(scope="module")
def url(service):
    with running(service.app) as root:
        yield root + "/v1"


@pytest.fixture(scope="module")
def client(url):
    with openai.OpenAI(base_url=url, api_key="test", max_retries=0, timeout=120) as c:
        yield c


def plain_text(smollm, prompt_ids, n: int) -> tuple[list[int], str]:
    run = RunConfig(target=MODEL, drafter="none", max_new_tokens=n, dtype="float32", device="cpu")
    d = build_decoder(run, resolve_models(run, target=smollm), prompt_ids)
    d.run()
    return d.generated, smollm.tokenizer.decode(d.generated, skip_special_tokens=True)


def test_models_lists_the_served_id(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_completion_is_plain_greedy_text_with_the_truth_in_usage(client, smollm, service):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": COPY}], max_tokens=12)
    from specviz.models import encode_prompt

    ids, text = plain_text(smollm, encode_prompt(smollm.tokenizer, COPY), 12)
    assert r.choices[0].message.content == text  # speculative greedy == plain greedy, through the API
    assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens == len(ids)
    truth = r.usage.model_extra["specviz"]
    assert truth["drafter"] == "lookup" and r.model_extra["metrics"]["speculative_decoding"]["num_spec_tokens"] == 4
    assert truth["tokens_per_target_pass"] == pytest.approx(r.usage.completion_tokens / truth["target_passes"])
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": COPY}], max_tokens=4)
    assert float(raw.headers["x-specviz-tokens-per-target-pass"]) > 0


def test_a_stream_carries_the_same_text_one_chunk_per_round(client, service):
    messages = [{"role": "user", "content": COPY}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24).choices[0].message.content
    pieces, usage, finish = [], None, None
    with client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, stream=True, stream_options={"include_usage": True}) as stream:
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
    assert "".join(pieces) == whole and finish in ("length", "stop")
    truth = usage.model_extra["specviz"]
    assert len(pieces) <= truth["target_passes"]  # one chunk per round (a round of a held-back piece sends none)
    assert truth["tokens_per_target_pass"] > 1.0  # lookup keeps guesses on a copy prompt


def test_text_completions_stream_and_not(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6)
    assert r.choices[0].text and r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_stop_cuts_the_text_before_the_sequence(client):
    messages = [{"role": "user", "content": COPY}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24).choices[0].message.content
    word = "mat"
    assert word in whole, whole
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, stop=[word])
    assert r.choices[0].message.content == whole[: whole.index(word)] and r.choices[0].finish_reason == "stop"
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, stop=word, stream=True) if c.choices
    )  # fmt: skip
    assert streamed == r.choices[0].message.content


def test_a_bad_model_name_gets_openais_not_found(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert "does not exist" in err.value.message and MODEL in err.value.message
    assert err.value.body["code"] == "model_not_found"


def test_a_prompt_over_the_cap_is_refused_in_tokens(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 400}], max_tokens=4)
    assert "tokens (counted with the target's tokenizer)" in err.value.message and "at most 200" in err.value.message
    with pytest.raises(openai.BadRequestError, match="at most 48"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=49)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5)
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=2)


def test_a_client_that_disconnects_mid_stream_ends_its_decode(client, service, monkeypatch):
    """After its second round the request waits on a gate the test holds, so the answer cannot finish before the client
    leaves, on any machine: the server must notice the disconnect, end the decode and free everything."""
    import asyncio

    before, rounds_before = len(service.history), service.rounds_run
    gate = threading.Event()
    turn_for = service._turn_for

    async def gated(work):
        result = await turn_for(work)
        if service.rounds_run >= rounds_before + 2:
            await asyncio.get_running_loop().run_in_executor(None, gate.wait, 120)
        return result

    monkeypatch.setattr(service, "_turn_for", gated)
    try:
        stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Write a long story about a dragon."}],
                                                max_tokens=48, stream=True)  # fmt: skip
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
        stream.close()  # the connection goes away mid-answer
        wait_until(lambda: len(service.history) > before and service.active == 0, what="the server noticing the disconnect")
    finally:
        gate.set()
        monkeypatch.undo()
    finished = service.history[-1]
    assert finished.reason == "disconnected"
    assert finished.rounds <= 3 and finished.tokens < 48  # it stopped where the client left (a pass under way finishes)
    # nothing left behind: once a pass already running on the model thread ends, the decoder (its KV cache) is freed
    wait_until(lambda: gc.collect() >= 0 and len(service.decoders) == 0, what="the decoder being freed")
    assert service.waiting == 0
    # the server is still fine for the next client
    assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2).usage.completion_tokens == 2


def test_streams_take_turns_round_by_round(url, service):
    """Two streams at once: B starts while A is mid-answer; the FIFO queue gives them rounds in turn, so B's first text
    arrives before A's last (one model turn at a time, nobody waits for a whole answer)."""
    order: list[str] = []
    a_started = threading.Event()

    def run(name: str, prompt: str) -> None:
        with openai.OpenAI(base_url=url, api_key="t", max_retries=0, timeout=120) as c:
            for chunk in c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=40, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    order.append(name)
                    a_started.set()

    a = threading.Thread(target=run, args=("A", "Write a poem about the sea."))
    a.start()
    assert a_started.wait(120)
    b = threading.Thread(target=run, args=("B", "Write a poem about the mountains."))
    b.start()
    a.join(180), b.join(180)
    assert "B" in order and order.index("B") < len(order) - 1 - order[::-1].index("A"), order


def test_the_concurrency_cap_answers_429(smollm):
    service = make_service(smollm, max_streams=1, max_tokens=40)
    with running(service.app) as root, openai.OpenAI(base_url=root + "/v1", api_key="t", max_retries=0, timeout=120) as c:
        stream = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to twenty."}], max_tokens=40, stream=True)
        next(iter(stream))
        with pytest.raises(openai.RateLimitError, match="at most 1 requests"):
            c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        stream.close()
        wait_until(lambda: service.active == 0, what="the slot coming back")


def test_per_token_chunks_and_a_hidden_truth(smollm):
    run = RunConfig(target=MODEL, drafter="lookup", num_draft_tokens=4, dtype="float32", device="cpu")
    service = Service(ServiceConfig(run, "smol", chunks="token", report_truth=False), resolve_models(run, target=smollm))
    with running(service.app) as root, openai.OpenAI(base_url=root + "/v1", api_key="t", max_retries=0, timeout=120) as c:
        chunks = [ch for ch in c.chat.completions.create(model="smol", messages=[{"role": "user", "content": COPY}], max_tokens=16, stream=True,
                                                        stream_options={"include_usage": True})]  # fmt: skip
        usage = chunks[-1].usage
        texts = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
        assert len(texts) >= service.history[-1].rounds  # per token: more chunks than rounds
        assert "specviz" not in (usage.model_extra or {})  # the truth is hidden
        raw = c.chat.completions.with_raw_response.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert "x-specviz-tokens-per-target-pass" not in raw.headers


def test_detokenizer_holds_pieces_of_a_character(smollm):
    tok = smollm.tokenizer
    ids = tok("日本 and 🙂 ok", add_special_tokens=False)["input_ids"]
    d = Detokenizer(tok)
    assert "".join(d.add(i) for i in ids) == tok.decode(ids)


def test_stop_text_holds_back_what_could_become_a_stop():
    s = StopText(["END"])
    assert s.feed("abc E") == "abc " and s.feed("N") == "" and s.feed("D more") == "" and s.stopped
    s = StopText(["END"])
    assert s.feed("abc E") == "abc " and s.feed("x") == "Ex" and s.flush() == ""


def test_a_request_that_waits_too_long_for_the_model_gets_503(smollm, monkeypatch):
    """A pass held on the model thread (behind a gate the test holds) keeps the turn; the next request gives up after the
    queue timeout with OpenAI's error shape (503 queue_timeout), not a server crash."""
    service = make_service(smollm, max_tokens=4, queue_timeout_s=0.5)
    gate, started = threading.Event(), threading.Event()
    turn_for = service._turn_for

    async def held(work):
        def blocked():
            started.set()
            gate.wait(120)
            return work()

        return await turn_for(blocked)

    monkeypatch.setattr(service, "_turn_for", held)
    with running(service.app) as root, openai.OpenAI(base_url=root + "/v1", api_key="t", max_retries=0, timeout=120) as c:
        first = threading.Thread(target=lambda: c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2))
        first.start()
        try:
            assert started.wait(60)
            with pytest.raises(openai.InternalServerError) as err:
                c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            assert err.value.status_code == 503 and "without a turn" in err.value.message
        finally:
            gate.set()
            first.join(120)


def test_serve_loads_the_models_on_the_thread_that_runs_every_pass(smollm):
    """torch's OpenMP team belongs to the thread that first runs a parallel region: models loaded on the main thread
    and passes run on the model thread made two teams, and serve streamed at half the engine's speed (21.6 against
    61.2 tokens/s in scripts/race_check.py). The loader runs on the model thread (known-bad control: Service() alone
    leaves the load wherever the caller did it)."""
    from specviz.workshop.service.server import load_on_model_thread

    run = RunConfig(target=MODEL, drafter="none", dtype="float32", device="cpu")
    where: list[str] = []

    def load():
        where.append(threading.current_thread().name)
        return resolve_models(run, target=smollm)

    service = load_on_model_thread(ServiceConfig(run, MODEL), load)
    passes = service._model_thread.submit(lambda: threading.current_thread().name).result()
    assert where == [passes] and passes.startswith("specviz-model")
    where.clear()
    plain = Service(ServiceConfig(run, MODEL), load())
    assert where != [plain._model_thread.submit(lambda: threading.current_thread().name).result()]
