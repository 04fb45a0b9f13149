"""The benchmark prompt set: a JSON list of {category, title, prompt} (assets/prompts.json), read and checked in one
place. The sweep (specviz.experiments.bench), the cost profile's context, the race, the batch and probe commands and
several scripts all read their prompts through load_prompts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "assets" / "prompts.json"
MAX_PROMPTS_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class BenchPrompt:
    category: str  # code, prose, copy, qa, ...
    title: str  # a short name for tables
    prompt: str


def load_prompts(path: str | Path = DEFAULT_PROMPTS, categories: Sequence[str] | None = None) -> list[BenchPrompt]:
    """Read a JSON list of {"category", "title", "prompt"} objects, keeping only `categories` when given."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No prompt file at {path}; pass --prompts with a JSON list of {{category, title, prompt}}.")
    if path.stat().st_size > MAX_PROMPTS_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_PROMPTS_FILE_BYTES:,} bytes; a benchmark prompt set should be small.")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}.") from exc
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path} must hold a non-empty JSON list of {{category, title, prompt}} objects.")
    prompts = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) and item[f].strip() for f in ("category", "title", "prompt")):
            raise ValueError(f"Entry {i} of {path} needs non-empty strings 'category', 'title' and 'prompt'.")
        prompts.append(BenchPrompt(item["category"].strip(), item["title"].strip(), item["prompt"]))
    if categories:
        known = sorted({p.category for p in prompts})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise ValueError(f"No prompts in category {', '.join(unknown)}; {path} has {', '.join(known)}.")
        prompts = [p for p in prompts if p.category in categories]
    return prompts


def prompt_categories(prompts: Sequence[BenchPrompt]) -> list[str]:
    """Categories in first-seen order."""
    return list(dict.fromkeys(p.category for p in prompts))


def first_per_category(prompts: Sequence[BenchPrompt], per_category: int | None) -> list[BenchPrompt]:
    """The first `per_category` prompts of each category, categories in first-seen order (None: all)."""
    if per_category is None:
        return list(prompts)
    if per_category < 1:
        raise ValueError(f"prompts per category must be at least 1; got {per_category}.")
    return [p for c in prompt_categories(prompts) for p in [q for q in prompts if q.category == c][:per_category]]
