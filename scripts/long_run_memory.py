"""Long runs: 500 rounds in one session must not grow memory without bound.

A session keeps its rounds (StepRecords with the top-N of each distribution, never whole vocabularies).
This script steps one session for --rounds rounds; when a run finishes (EOS or max_new_tokens) it starts
a fresh run and keeps going, the way a user presses Reset and continues, while the session's history
keeps every round. Every --every rounds it samples the process RSS and the pickled size of the history,
prints a table, and ends with a verdict (exit code 1 on FAIL).

    python scripts/long_run_memory.py                      # the embedded SmolLM2-135M with the app's default drafter
    python scripts/long_run_memory.py --drafter lookup     # prompt lookup: no q_draft, the smallest records
    python scripts/long_run_memory.py --model toy          # a plain-torch toy LM: the same loop without a real model
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import time
from collections.abc import Sequence

import psutil
import torch

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.records import StepRecord
from specviz.drafters import NGramDrafter, PromptLookupDrafter

PROMPT = (
    "Repeat this list, one colour per line, ten times: red, orange, yellow, green, blue, indigo, violet. "
    "Then write a Python function that reverses a string and explain it."
)
RSS_SLACK_MIB = 64.0  # allocator and torch caches settle at a plateau; allow this much on top of the history


class ToyLM:
    """A plain-torch CachedLM with a 49,152-token vocabulary (SmolLM2's), cheap enough for thousands of rounds.

    logits(next | last id) = E[last] @ W: a random low-rank bigram model; the 'cache' is the token list."""

    can_verify_tree = False

    def __init__(self, vocab_size: int = 49_152, dim: int = 16, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.device = torch.device("cpu")
        self.embed = torch.randn(vocab_size, dim, generator=g)  # (V, d)
        self.head = torch.randn(dim, vocab_size, generator=g) * 2.0  # (d, V)
        self._tokens: list[int] = []

    @property
    def tokens(self) -> Sequence[int]:
        return self._tokens

    def extend(self, ids: Sequence[int], last_only: bool = False) -> torch.Tensor:
        self._tokens.extend(int(i) for i in ids)
        return self.embed[torch.tensor(list(ids))] @ self.head  # (T, V)

    def crop(self, length: int) -> None:
        del self._tokens[length:]


class Session:
    """What a browser session keeps: the current run and every round so far."""

    def __init__(self, new_run) -> None:
        self.new_run = new_run
        self.run = new_run()
        self.history: list[StepRecord] = []
        self.runs = 1

    def step(self) -> StepRecord:
        if self.run.done:  # reset and continue: the old run (and its KV cache) is dropped
            self.run = self.new_run()
            self.runs += 1
        record = self.run.step()
        self.history.append(record)
        return record


def embedded_session(args: argparse.Namespace) -> tuple[Session, int, str]:
    from specviz.models import encode_prompt, load_model
    from specviz.runs import RunModels, build_decoder, resolve_models

    target = load_model(device="cpu", dtype="float32")
    config = RunConfig(
        drafter=args.drafter, num_draft_tokens=args.k, auto_k=False, temperature=args.temperature, seed=args.seed,
        max_new_tokens=args.max_new_tokens,
    )  # fmt: skip
    prompt_ids = encode_prompt(target.tokenizer, PROMPT)
    early_exit = resolve_models(config, target=target).early_exit  # None unless the drafter is early exit
    counter = iter(range(10**9))

    def new_run() -> SpeculativeDecoder:
        return build_decoder(config, RunModels(target, early_exit=early_exit), prompt_ids, seed=args.seed + next(counter))

    return Session(new_run), target.vocab_size, f"SmolLM2-135M (embedded), drafter {args.drafter}"


def toy_session(args: argparse.Namespace) -> tuple[Session, int, str]:
    lm_seed = 0
    prompt_ids = [int(i) for i in torch.randint(0, 49_152, (24,), generator=torch.Generator().manual_seed(1))]
    prompt_ids = prompt_ids + prompt_ids  # a repeat, so prompt lookup finds drafts
    counter = iter(range(10**9))

    def new_run() -> SpeculativeDecoder:
        config = DecodeConfig(
            num_draft_tokens=args.k,
            sampling=RunConfig(temperature=args.temperature).sampling,
            seed=args.seed + next(counter),
            max_new_tokens=args.max_new_tokens,
        )
        drafter = NGramDrafter(49_152) if args.drafter == "ngram" else PromptLookupDrafter()
        return SpeculativeDecoder(ToyLM(seed=lm_seed), drafter, prompt_ids, config)

    if args.drafter == "early-exit":
        raise SystemExit("--drafter early-exit needs --model embedded")
    return Session(new_run), 49_152, f"toy low-rank bigram LM (49,152 tokens), drafter {args.drafter}"


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def history_kib(history: list[StepRecord]) -> float:
    """Pickled size: what saving the session's rounds would write."""
    return len(pickle.dumps(history, protocol=pickle.HIGHEST_PROTOCOL)) / 1024


def deep_kib(obj: object) -> float:
    """Python objects reachable from obj (records, tuples, floats), each counted once: the history's RAM."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, (list, tuple)):
            stack.extend(o)
        elif hasattr(o, "__dataclass_fields__"):
            stack.extend(getattr(o, f) for f in o.__dataclass_fields__)
    return total / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("embedded", "toy"), default="embedded")
    parser.add_argument(
        "--drafter", choices=("ngram", "lookup", "early-exit"), default=RunConfig().drafter, help="early-exit: embedded model only"
    )
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per run; a finished run is reset and continued")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    start_rss = rss_mib()
    session, vocab, label = (embedded_session if args.model == "embedded" else toy_session)(args)
    loaded_rss = rss_mib()
    print(f"{label}; k={args.k}, temperature={args.temperature}, max_new_tokens per run={args.max_new_tokens}")
    print(f"RSS before loading {start_rss:.0f} MiB, after loading {loaded_rss:.0f} MiB")
    print(
        f"{'round':>6} {'runs':>5} {'tokens':>7} {'context':>8} {'RSS MiB':>8} {'history KiB':>12} "
        f"{'pickled KiB':>12} {'KiB/round':>10} {'s':>7}"
    )
    samples: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    for i in range(1, args.rounds + 1):
        session.step()
        if i % args.every == 0 or i == args.rounds:
            rss, hist, pickled = rss_mib(), deep_kib(session.history), history_kib(session.history)
            samples.append((i, rss, hist))
            tokens = sum(len(r.emitted) for r in session.history)
            print(
                f"{i:>6} {session.runs:>5} {tokens:>7} {len(session.run.tokens):>8} {rss:>8.1f} {hist:>12.1f} "
                f"{pickled:>12.1f} {hist / i:>10.2f} {time.perf_counter() - t0:>7.1f}",
                flush=True,
            )

    # What a round would cost if the history kept whole distributions: p_target and q_draft, (k+1) x V floats.
    full_kib_per_round = 2 * (args.k + 1) * vocab * 4 / 1024
    kib_per_round = samples[-1][2] / samples[-1][0]
    first, last = samples[min(1, len(samples) - 1)], samples[-1]  # skip the first sample: caches still warming
    rss_growth = last[1] - first[1]
    history_growth_mib = (last[2] - first[2]) / 1024
    bounded_records = kib_per_round < 0.05 * full_kib_per_round
    bounded_rss = rss_growth <= history_growth_mib + RSS_SLACK_MIB
    print()
    print(f"history in RAM: {kib_per_round:.2f} KiB per round (whole distributions would be {full_kib_per_round:,.0f} KiB per round)")
    print(
        f"RSS from round {first[0]} to {last[0]}: {rss_growth:+.1f} MiB; the history grew {history_growth_mib:.2f} MiB "
        f"(allowed: history growth + {RSS_SLACK_MIB:.0f} MiB)"
    )
    ok = bounded_records and bounded_rss
    reasons = []
    if not bounded_records:
        reasons.append("records hold more than top-N per position")
    if not bounded_rss:
        reasons.append("RSS grows faster than the top-N history")
    print(
        "VERDICT: PASS - memory grows only with the top-N history (linear, small); no per-round leak."
        if ok
        else f"VERDICT: FAIL - {'; '.join(reasons)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
