"""One machine's cost profile as a record: what a target pass over n new tokens costs next to a 1-token pass, and what
each drafter costs per drafted token, with its JSON and a checked loader. Plain Python: k: auto (specviz.core.auto_k)
and the theory page read it; specviz.experiments.cost_profile measures it (`python -m specviz profile`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specviz.core.theory import VerifyCurve

SCHEMA = "specviz.profile/1"
MAX_PROFILE_BYTES = 200_000


@dataclass(frozen=True)
class CostProfile:
    """One machine's measured costs. pass_ms[n-1]: median ms of a target pass over n new tokens after
    context_length cached ones (n = 1..len). draft_cost: drafter -> ms per drafted token / pass_ms[0]."""

    target: str
    device: str  # e.g. "cpu", "cuda:0"
    device_name: str  # the CPU or GPU model, as far as the system says
    dtype: str
    torch_version: str
    threads: int  # torch intra-op threads during the measurement
    clock: str  # "wall" or "cpu" (process CPU time)
    context_length: int
    repeats: int
    pass_ms: tuple[float, ...]
    draft_ms_per_token: dict[str, float] = field(default_factory=dict)
    created: str = ""  # ISO time (UTC)
    label: str = ""  # a short name for menus, e.g. "this CPU (2 cores)"
    load_average: str = ""  # the 1-minute load average before and after measuring (a busy machine's numbers mislead)
    batch_pass_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)  # "B" -> ms of one pass over B rows, t = 1..

    def __post_init__(self) -> None:
        if len(self.pass_ms) < 2:
            raise ValueError("A profile needs passes over at least 1 and 2 tokens.")
        if not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in self.pass_ms):
            raise ValueError("Every pass time in a profile must be a positive number of milliseconds.")
        for name, ms in self.draft_ms_per_token.items():
            if not (isinstance(ms, (int, float)) and math.isfinite(ms) and ms >= 0):
                raise ValueError(f"Draft cost of {name!r} must be a number of milliseconds >= 0; got {ms!r}.")
        if self.threads < 1 or self.context_length < 1 or self.repeats < 1:
            raise ValueError("threads, context_length and repeats must be at least 1.")
        for b, times in self.batch_pass_ms.items():
            if not (b.isdigit() and int(b) >= 1 and times):
                raise ValueError(f"batch_pass_ms needs batch sizes >= 1 as keys and a list of times each; got {b!r}.")
            if not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times):
                raise ValueError(f"Every batched pass time (batch {b}) must be a positive number of milliseconds.")

    @property
    def curve(self) -> VerifyCurve:
        """c_verify(k) = pass over k+1 tokens / pass over 1 token."""
        return VerifyCurve.from_pass_ms(self.pass_ms)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes with measured passes, ascending; () for a profile measured without --batch."""
        return tuple(sorted(int(b) for b in self.batch_pass_ms))

    def batch_pass(self, batch_size: int) -> tuple[float, ...]:
        """ms of one pass over batch_size rows, each adding t = 1.. tokens."""
        return self.batch_pass_ms[str(batch_size)]

    @property
    def draft_cost(self) -> dict[str, float]:
        """c per drafter: ms per drafted token / ms of a 1-token target pass."""
        return {name: ms / self.pass_ms[0] for name, ms in self.draft_ms_per_token.items()}

    @property
    def name(self) -> str:
        return self.label or f"{self.device_name} · {self.dtype} · {self.threads} thread{'s' if self.threads != 1 else ''}"

    def to_json(self) -> dict:
        out = asdict(self)
        out["pass_ms"] = list(self.pass_ms)
        out["batch_pass_ms"] = {b: list(self.batch_pass(int(b))) for b in sorted(self.batch_pass_ms, key=int)}
        out["verify_cost"] = {str(k): round(v, 4) for k, v in enumerate(self.curve.costs)}
        out["draft_cost"] = {name: round(v, 5) for name, v in self.draft_cost.items()}
        return {"schema": SCHEMA, **out}

    @classmethod
    def from_json(cls, obj: object) -> CostProfile:
        """Validate a parsed JSON object (e.g. a profile someone uploaded) and build the profile."""
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            raise ValueError(f"Not a specviz profile: expected a JSON object with \"schema\": \"{SCHEMA}\".")
        try:
            return cls(
                target=str(obj["target"]), device=str(obj["device"]), device_name=str(obj["device_name"]),
                dtype=str(obj["dtype"]), torch_version=str(obj["torch_version"]), threads=int(obj["threads"]),
                clock=str(obj["clock"]), context_length=int(obj["context_length"]), repeats=int(obj["repeats"]),
                pass_ms=tuple(float(t) for t in obj["pass_ms"]),
                draft_ms_per_token={str(k): float(v) for k, v in dict(obj.get("draft_ms_per_token") or {}).items()},
                created=str(obj.get("created", "")), label=str(obj.get("label", "")), load_average=str(obj.get("load_average", "")),
                batch_pass_ms={str(b): tuple(float(t) for t in ts) for b, ts in dict(obj.get("batch_pass_ms") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"This profile is missing or has a bad field ({type(exc).__name__}: {exc}); re-run `python -m specviz profile`.") from exc


def load_profile(path: str | Path) -> CostProfile:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No profile at {path}; make one with `python -m specviz profile --out {path}`.")
    if path.stat().st_size > MAX_PROFILE_BYTES:
        raise ValueError(f"{path} is over {MAX_PROFILE_BYTES:,} bytes; a profile is a few kilobytes.")
    try:
        return CostProfile.from_json(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}.") from exc
