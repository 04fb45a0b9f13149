"""Example prompts for the sidebar: read from assets/prompts.json (shared with the benchmark) when present."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PROMPTS_FILE = Path(__file__).resolve().parents[3] / "assets" / "prompts.json"
# What each category does with the default drafter (the n-gram model), measured over whole runs at the defaults:
# copy 1.6-6 tokens per target pass, code 1.1-2.1, prose and short answers 1.0-1.1 (they rarely draft at all).
# The categories are listed in this order; the first example is the page's default prompt, which drafts from the first Step.
CATEGORY_NOTES = {
    "copy": "copies its input: long runs drafted and kept",
    "code": "code: drafts where names and lines repeat",
    "prose": "open-ended: little to copy, rarely drafts",
    "qa": "short answer: little to copy, rarely drafts",
}
FALLBACK = [
    {"category": "copy", "title": "repeat after an example", "prompt": "Repeat each passage word for word, as in the example.\n\nuser\nThe cat sat on the mat.\nassistant\nThe cat sat on the mat.\nuser\nThe river rose slowly through the night. By morning the lower fields were under water, and the farmers stood on the bridge, watching the current carry fence posts and straw toward the sea."},
    {"category": "copy", "title": "repeat passage", "prompt": "Repeat the following passage exactly, word for word:\n\nThe river rose slowly through the night. By morning the lower fields were under water, and the farmers stood on the bridge, watching the current carry fence posts and straw toward the sea."},
    {"category": "code", "title": "reverse words", "prompt": "Write a Python function reverse_words(text) that reverses the order of the words in a sentence. Include a docstring."},
    {"category": "prose", "title": "lighthouse", "prompt": "Write the opening paragraph of a short story about a lighthouse keeper who finds a message in a bottle."},
]


@dataclass(frozen=True)
class ExamplePrompt:
    category: str
    title: str
    prompt: str

    @property
    def label(self) -> str:
        note = CATEGORY_NOTES.get(self.category)
        return f"{self.category}: {self.title}" + (f" ({note})" if note else "")


def load_examples(path: Path = PROMPTS_FILE) -> list[ExamplePrompt]:
    """The shared prompt set, copy-heavy first (the default drafter's best case), then code, prose, the rest; the
    first is the page's default prompt (assets/prompts.json lists it first among the copy prompts)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        examples = [ExamplePrompt(str(e["category"]), str(e["title"]), str(e["prompt"])) for e in raw]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.info("using built-in example prompts (%s: %s)", type(exc).__name__, exc)
        examples = [ExamplePrompt(**e) for e in FALLBACK]
    order = {c: i for i, c in enumerate(CATEGORY_NOTES)}
    return sorted(examples, key=lambda e: order.get(e.category, len(order)))
