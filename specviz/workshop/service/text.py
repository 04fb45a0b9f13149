"""A request's committed tokens -> the text it sends: pieces of a character held back until whole (Detokenizer), stop
sequences cut and the tail that could still become one held back (StopText). Plain Python over a tokenizer."""

from __future__ import annotations

from collections.abc import Sequence


class Detokenizer:
    """Token ids -> text as it becomes whole: a piece of a character is held back until its last byte arrives.
    Decodes a short window (from the last whole point), so each token costs a constant amount of work."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # ids whose text has been given out

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self.prefix : self.read])
        text = self._decode(self.ids[self.prefix :])
        if len(text) > len(before) and not text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return text[len(before) :]
        return ""


class StopText:
    """Text on its way out, checked for stop sequences: what may be sent now, and whether a stop sequence ended it.
    The longest tail that could still become a stop sequence is held back until it cannot."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += text
        hits = [(i, s) for s in self.stop if (i := self.pending.find(s)) >= 0]
        if hits:
            cut = min(i for i, _ in hits)
            out, self.pending, self.stopped = self.pending[:cut], "", True
            return out
        hold = max((n for s in self.stop for n in range(len(s) - 1, 0, -1) if self.pending.endswith(s[:n])), default=0)
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold :]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out
