"""The race's record: one prompt decoded plainly and speculatively, each alone, with the wall-clock time each round
committed its tokens. Plain values only, JSON in and out, validated on the way in like any file from elsewhere: a
saved race plays back (specviz.viz.playback) without a model, for a room's followers or from a download.

A lane's clock starts when its decode is asked for (the prefill is inside the time to first token) and reads the time
each round committed, with the time the engine spent building its chart records taken out (a service builds none).
A speculative round commits all its tokens at one time: that is the burst a client sees.

JSON (format "specviz-race", version 1):
    {"format", "version", "prompt", "prompt_ids", "target", "precision", "drafter", "drafter_label",
     "num_draft_tokens", "temperature", "seed", "max_new_tokens", "created_at", "machine": {name: text},
     "token_text": {"<id>": text}, "lanes": {"plain": LANE, "speculative": LANE}}
    LANE = {"label", "prefill_s", "rounds": [{"t": seconds, "ids": [token ids]}, ...]
            (optional, the speculative lane) "speculative_decoding": vLLM's object, detailed (SpecDecodeSteps)}
Plain Python: nothing of specviz but the burst analysis and the metrics (a race saved before the lane carried its
verify steps has no "speculative_decoding"; it still plays).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specviz.core.bursts import Arrivals, BurstReport, analyze
from specviz.core.limits import SEED_MAX
from specviz.core.metrics import SpecDecodeSteps

RACE_FORMAT = "specviz-race"
RACE_VERSION = 1
MAX_LANE_TOKENS = 2048  # the engine's max new tokens
MAX_PROMPT_CHARS = 20_000
MAX_PROMPT_TOKENS = 32_768
MAX_TOKEN_TEXT = 256  # characters of one token's text (a token is a few bytes; ⟨..⟩ pieces are longer)
MAX_LABEL = 200
MAX_SECONDS = 24 * 3600.0
MAX_TOKEN_ID = 10_000_000
MAX_MACHINE_KEYS = 12
MAX_FILE_BYTES = 4 * 2**20  # a race of 2 x 2048 tokens with texts is well under 1 MB
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
LANES = ("plain", "speculative")


@dataclass(frozen=True)
class RaceLane:
    """One decode of the race: when each round committed, and what."""

    label: str  # "plain decoding", "prompt lookup, k=8"
    commit_s: tuple[float, ...]  # per round: seconds from the request to the round's commit
    ids: tuple[tuple[int, ...], ...]  # per round: the token ids it committed
    prefill_s: float = 0.0  # of which the prompt's prefill (inside the time to first token)
    spec_decode: SpecDecodeSteps | None = None  # the speculative lane's verify steps (vLLM's counts), None for plain decoding

    @property
    def tokens(self) -> list[int]:
        return [t for round_ids in self.ids for t in round_ids]

    @property
    def num_tokens(self) -> int:
        return sum(len(r) for r in self.ids)

    @property
    def target_passes(self) -> int:
        """One verify pass per round (the prefill not counted, as RunMetrics counts them)."""
        return len(self.ids)

    @property
    def tokens_per_target_pass(self) -> float | None:
        return self.num_tokens / self.target_passes if self.target_passes else None

    @property
    def ttft_s(self) -> float | None:
        return self.commit_s[0] if self.commit_s else None

    @property
    def last_s(self) -> float | None:
        return self.commit_s[-1] if self.commit_s else None

    @property
    def tokens_per_s(self) -> float | None:
        """New tokens / time to the last token (the prefill included): what a user of a service sees."""
        return self.num_tokens / self.last_s if self.last_s else None

    def arrivals(self) -> Arrivals:
        return Arrivals.of(self.commit_s, [len(r) for r in self.ids])

    def token_times(self) -> list[float]:
        """Per token: its round's commit time."""
        return [t for t, r in zip(self.commit_s, self.ids) for _ in r]

    def bursts(self) -> BurstReport:
        return analyze([self.arrivals()])

    def to_json(self) -> dict:
        out = {"label": self.label, "prefill_s": self.prefill_s, "rounds": [{"t": t, "ids": list(r)} for t, r in zip(self.commit_s, self.ids)]}
        if self.spec_decode is not None:
            out["speculative_decoding"] = self.spec_decode.to_json(detailed=True)
        return out


@dataclass(frozen=True)
class RaceResult:
    """Both lanes of one race and what they ran with."""

    prompt: str
    prompt_ids: tuple[int, ...]
    target: str  # the target model's name
    precision: str
    drafter: str  # the speculative lane's drafter kind
    drafter_label: str
    num_draft_tokens: int
    temperature: float
    seed: int
    max_new_tokens: int
    plain: RaceLane
    speculative: RaceLane
    token_text: Mapping[int, str]  # every id either lane committed -> its text (untrusted: escape when drawing)
    machine: Mapping[str, str] = field(default_factory=dict)  # cpu, threads, load average before and after
    created_at: float = 0.0

    @property
    def lanes(self) -> tuple[RaceLane, RaceLane]:
        return self.plain, self.speculative

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def identical(self) -> bool:
        return self.plain.tokens == self.speculative.tokens

    @property
    def first_difference(self) -> int | None:
        """The first new-token position where the lanes differ (one ending early counts), None when identical."""
        a, b = self.plain.tokens, self.speculative.tokens
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    @property
    def speedup(self) -> float | None:
        """Plain decoding's time to last token / speculative decoding's, for the same text (greedy) or length."""
        p, s = self.plain.last_s, self.speculative.last_s
        return p / s if p and s else None

    def text(self, lane: RaceLane) -> str:
        return "".join(self.token_text.get(t, "") for t in lane.tokens)

    def to_json(self) -> dict:
        return {
            "format": RACE_FORMAT, "version": RACE_VERSION, "prompt": self.prompt, "prompt_ids": list(self.prompt_ids),
            "target": self.target, "precision": self.precision, "drafter": self.drafter, "drafter_label": self.drafter_label,
            "num_draft_tokens": self.num_draft_tokens, "temperature": self.temperature, "seed": self.seed,
            "max_new_tokens": self.max_new_tokens, "created_at": self.created_at, "machine": dict(self.machine),
            "token_text": {str(k): v for k, v in sorted(self.token_text.items())},
            "lanes": {"plain": self.plain.to_json(), "speculative": self.speculative.to_json()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: object) -> RaceResult:
        """Parse and validate a race (a file from elsewhere is hostile until checked); ValueError says what is wrong."""
        raw = _mapping(data, "a race", {"format", "version", "prompt", "prompt_ids", "target", "precision", "drafter", "drafter_label",
                                        "num_draft_tokens", "temperature", "seed", "max_new_tokens", "created_at", "machine",
                                        "token_text", "lanes"})  # fmt: skip
        if raw["format"] != RACE_FORMAT or raw["version"] != RACE_VERSION:
            raise ValueError(f"Not a race of this version (format {RACE_FORMAT!r}, version {RACE_VERSION}).")
        prompt = _text(raw["prompt"], "prompt", MAX_PROMPT_CHARS)
        prompt_ids = _ids(raw["prompt_ids"], "prompt_ids", MAX_PROMPT_TOKENS)
        drafter = raw["drafter"]
        if not isinstance(drafter, str) or not _NAME.fullmatch(drafter):
            raise ValueError("drafter must be a drafter's short name (lower-case letters, digits and hyphens).")
        texts = _mapping(raw["token_text"], "token_text")
        if len(texts) > 2 * MAX_LANE_TOKENS:
            raise ValueError(f"token_text holds more than {2 * MAX_LANE_TOKENS} entries.")
        token_text: dict[int, str] = {}
        for key, value in texts.items():
            if not isinstance(key, str) or not key.isascii() or not key.isdigit() or len(key) > 12 or int(key) > MAX_TOKEN_ID:
                raise ValueError("token_text keys must be token ids.")
            token_text[int(key)] = _text(value, "a token's text", MAX_TOKEN_TEXT, empty=True)
        machine = _mapping(raw["machine"], "machine")
        if len(machine) > MAX_MACHINE_KEYS:
            raise ValueError(f"machine holds more than {MAX_MACHINE_KEYS} entries.")
        lanes = _mapping(raw["lanes"], "lanes", set(LANES))
        plain, speculative = (_lane(lanes[name], name) for name in LANES)
        missing = {t for lane in (plain, speculative) for t in lane.tokens} - set(token_text)
        if missing:
            raise ValueError(f"token_text has no text for {len(missing)} committed token id(s), e.g. {min(missing)}.")
        return cls(
            prompt=prompt, prompt_ids=prompt_ids, target=_text(raw["target"], "target", MAX_LABEL),
            precision=_text(raw["precision"], "precision", 40), drafter=drafter,
            drafter_label=_text(raw["drafter_label"], "drafter_label", MAX_LABEL),
            num_draft_tokens=_whole(raw["num_draft_tokens"], "num_draft_tokens", 0, 64),
            temperature=_real(raw["temperature"], "temperature", 0.0, 2.0), seed=_whole(raw["seed"], "seed", 0, SEED_MAX),
            max_new_tokens=_whole(raw["max_new_tokens"], "max_new_tokens", 1, MAX_LANE_TOKENS), plain=plain, speculative=speculative,
            token_text=token_text, machine={_text(k, "a machine key", 40): _text(v, "a machine value", MAX_LABEL, empty=True) for k, v in machine.items()},
            created_at=_real(raw["created_at"], "created_at", 0.0, 1e11),
        )  # fmt: skip


def _lane(data: object, name: str) -> RaceLane:
    raw = _mapping(data, f"the {name} lane", {"label", "prefill_s", "rounds"}, optional={"speculative_decoding"})
    rounds = raw["rounds"]
    if not isinstance(rounds, list) or not rounds or len(rounds) > MAX_LANE_TOKENS:
        raise ValueError(f"The {name} lane needs 1 to {MAX_LANE_TOKENS} rounds.")
    times, ids = [], []
    for r in rounds:
        item = _mapping(r, f"a round of the {name} lane", {"t", "ids"})
        times.append(_real(item["t"], f"a commit time of the {name} lane", 0.0, MAX_SECONDS))
        round_ids = _ids(item["ids"], f"a round of the {name} lane", MAX_LANE_TOKENS)
        if not round_ids:
            raise ValueError(f"Every round commits at least one token; one of the {name} lane's commits none.")
        ids.append(round_ids)
    if any(b < a for a, b in zip(times, times[1:])):
        raise ValueError(f"The {name} lane's commit times go backwards.")
    if sum(len(r) for r in ids) > MAX_LANE_TOKENS:
        raise ValueError(f"The {name} lane commits more than {MAX_LANE_TOKENS} tokens.")
    prefill = _real(raw["prefill_s"], f"the {name} lane's prefill_s", 0.0, MAX_SECONDS)
    steps = _steps(raw["speculative_decoding"], name, len(ids)) if "speculative_decoding" in raw else None
    return RaceLane(_text(raw["label"], f"the {name} lane's label", MAX_LABEL), tuple(times), tuple(ids), prefill, steps)


def _steps(data: object, name: str, rounds: int) -> SpecDecodeSteps:
    """A lane's verify steps from vLLM's detailed object: the per-step counts are read, every other field derived."""
    what = f"the {name} lane's speculative_decoding"
    raw = _mapping(data, what)
    k = _whole(raw.get("num_spec_tokens"), f"num_spec_tokens in {what}", 0, MAX_LANE_TOKENS)
    accepted = _ids(raw.get("per_step_accepted"), f"per_step_accepted in {what}", rounds)
    drafted = _ids(raw.get("per_step_drafted"), f"per_step_drafted in {what}", rounds)
    if len(accepted) != len(drafted) or any(a > d for a, d in zip(accepted, drafted)) or any(a > k for a in accepted):
        raise ValueError(f"{what}: per_step_accepted and per_step_drafted must pair up, with accepted ≤ drafted and ≤ num_spec_tokens.")
    return SpecDecodeSteps(k, accepted, drafted)


def _mapping(data: object, what: str, keys: set[str] | None = None, optional: set[str] = frozenset()) -> Mapping:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object.")
    if keys is not None and not keys <= set(data) <= keys | optional:
        wrong = sorted((set(data) ^ keys) - optional)
        raise ValueError(f"{what} has the wrong fields ({', '.join(map(str, wrong[:5]))}).")
    return data


def _text(value: object, what: str, limit: int, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()) or len(value) > limit:
        raise ValueError(f"{what} must be text of {'0' if empty else '1'} to {limit:,} characters.")
    return value


def _whole(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
        raise ValueError(f"{what} must be a whole number from {low} to {high}.")
    return value


def _real(value: object, what: str, low: float, high: float) -> float:
    # bounds before isfinite: an int beyond a float's range (10**400) makes isfinite raise OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number from {low:g} to {high:g}.")
    return float(value)


def _ids(value: object, what: str, limit: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > limit:
        raise ValueError(f"{what} must be a list of at most {limit:,} token ids.")
    return tuple(_whole(v, f"a token id in {what}", 0, MAX_TOKEN_ID) for v in value)


def lane_of(
    label: str, commit_s: Sequence[float], ids: Sequence[Sequence[int]], prefill_s: float = 0.0, spec_decode: SpecDecodeSteps | None = None
) -> RaceLane:
    """A lane from plain sequences (tests, the runner)."""
    return RaceLane(label, tuple(float(t) for t in commit_s), tuple(tuple(int(i) for i in r) for r in ids), float(prefill_s), spec_decode)
