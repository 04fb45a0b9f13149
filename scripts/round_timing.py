"""How long one round takes, chain and tree, on a tiny random Llama (the test suite's size), and how often it reads
the device back: for comparing the round's code before and after a change, not the model.

    python scripts/round_timing.py                  # N=200 rounds per shape, best of 5 repeats, ms per round
    python scripts/round_timing.py --count-syncs    # host reads per round (.item/.tolist/.cpu), no timing
    python scripts/round_timing.py --quick          # a smoke run: 5 rounds, 1 repeat

It uses only SpeculativeDecoder(target, drafter, prompt, DecodeConfig) and step(), so the same file runs against an
older checkout: `cd OTHER_CHECKOUT && PYTHONPATH=. python /path/to/round_timing.py` (it prints which specviz it
imported). Conditions: CPU, float32, one intra-op thread, a draft model drafter (a noised copy of the target), k=4,
width 1 (chain) and 3 (tree), temperature 1.0 (both branches of the rule). Runs restart when they finish. Nothing is
downloaded: the two models are built in a temporary folder from a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import specviz
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.sampling import SamplingConfig
from specviz.drafters.model import ModelDrafter
from specviz.models import load_model
from specviz.models.adapter import HFCachedLM

VOCAB = 200
PROMPT = list(range(5, 45))  # 40 tokens


def tiny_llama(folder: Path, noise_seed: int | None) -> Path:
    """A 2-layer random Llama (hidden 32), the size tests/conftest.py builds; noise_seed: a noised copy (the draft)."""
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=3)  # fmt: skip
    model = LlamaForCausalLM(config)
    if noise_seed is not None:  # seeded noise at half the init scale: a draft that agrees with the target part of the time
        weights = parameters_to_vector(model.parameters()).detach()
        noise = torch.randn(weights.shape, generator=torch.Generator().manual_seed(noise_seed))
        vector_to_parameters(weights + 0.5 * config.initializer_range * noise, model.parameters())
    model.save_pretrained(folder)
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")), unk_token="w0")
    tok.save_pretrained(folder)
    return folder


def decoder(target, draft, width: int, rounds: int) -> SpeculativeDecoder:
    sampling = SamplingConfig(temperature=1.0)
    config = DecodeConfig(num_draft_tokens=4, sampling=sampling, seed=0, max_new_tokens=max(8, rounds * 5), tree_width=width)
    drafter = ModelDrafter(HFCachedLM(draft.model, VOCAB), sampling)
    return SpeculativeDecoder(HFCachedLM(target.model, VOCAB), drafter, PROMPT, config)


def rounds_ms(target, draft, width: int, rounds: int) -> float:
    """ms per round over `rounds` rounds (prefill excluded: new runs start outside the clock)."""
    total, done = 0.0, 0
    while done < rounds:
        dec = decoder(target, draft, width, rounds - done)
        start = time.perf_counter()
        while not dec.done and done < rounds:
            dec.step()
            done += 1
        total += time.perf_counter() - start
    return total * 1000.0 / rounds


@contextmanager
def counting() -> Iterator[Counter]:
    """Count Tensor.item / tolist / cpu calls (the host reads the device back) while the block runs."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "cpu")}

    def wrap(name, fn):
        def counted(self, *args, **kwargs):
            counts[name] += 1
            return fn(self, *args, **kwargs)

        return counted

    for name, fn in originals.items():
        setattr(torch.Tensor, name, wrap(name, fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


def syncs_per_round(target, draft, width: int, rounds: int) -> dict[str, float]:
    dec = decoder(target, draft, width, rounds)
    with counting() as counts:
        n = 0
        while not dec.done and n < rounds:
            dec.step()
            n += 1
    return {name: counts[name] / n for name in ("item", "tolist", "cpu")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="5 rounds, 1 repeat: a smoke run")
    parser.add_argument("--count-syncs", action="store_true", help="host reads per round instead of times")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rounds, repeats = (5, 1) if args.quick else (args.rounds, args.repeats)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        target = load_model(str(tiny_llama(Path(tmp) / "target", None)), "cpu", "float32")
        draft = load_model(str(tiny_llama(Path(tmp) / "draft", 2)), "cpu", "float32")
        result: dict = {"specviz": specviz.__file__, "rounds": rounds, "repeats": repeats}
        for shape, width in (("chain", 1), ("tree", 3)):
            if args.count_syncs:
                result[shape] = syncs_per_round(target, draft, width, rounds)
            else:
                rounds_ms(target, draft, width, 3)  # warm up
                times = [rounds_ms(target, draft, width, rounds) for _ in range(repeats)]
                result[shape] = {"best_ms": min(times), "median_ms": statistics.median(times)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"specviz from {result['specviz']}; {rounds} rounds x {repeats}")
        for shape in ("chain", "tree"):
            print(f"{shape:6s} " + "  ".join(f"{k} {v:.3f}" for k, v in result[shape].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
