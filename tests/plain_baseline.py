"""Plain decoding stepped by the test itself, in place of the page's shared, background-measured baseline
(specviz.workshop.baselines.BaselineRun): what the step-through views read of one (records, error, prefill_ms,
generated, covers()), with a failure raised, not kept."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.core.decoding import SpeculativeDecoder
from specviz.core.records import StepRecord


@dataclass
class Baseline:
    decoder: SpeculativeDecoder
    error: str | None = None

    @property
    def records(self) -> list[StepRecord]:
        return self.decoder.records

    @property
    def prefill_ms(self) -> float:
        return self.decoder.prefill_ms

    @property
    def generated(self) -> list[int]:
        return self.decoder.generated

    def covers(self, num_tokens: int) -> bool:
        return self.decoder.done or self.error is not None or len(self.decoder.generated) >= num_tokens

    def advance_to(self, num_tokens: int) -> None:
        """Step plain decoding until it has num_tokens (or is done), as the page's worker does in the background."""
        while not self.decoder.done and len(self.decoder.generated) < num_tokens:
            self.decoder.step()
