"""Token Recycling as drafter (Luo et al., 2024, arXiv 2408.08696): the target's own next-token guesses, kept in a table.

Model. An adjacency table, token -> the target's top-K candidates for the token after it, the last time the target
read that token. Every pass the run makes fills it: the prefill (every prompt row's logits, computed in chunks for
this drafter) and every verify pass (the newest token's row and every drafted node's, the rejected ones' included:
their candidates are computed anyway and would otherwise be thrown away, which is the paper's "recycling"). A row
is overwritten whole by the latest pass that read its token. Nothing is trained and nothing outlives the run: the
table belongs to this drafter, never to the shared model.

Drafting. A chain follows the table's first column from the newest committed token: x_1 = T[newest, 0], x_2 =
T[x_1, 0], ...; it stops at a token the target has not read yet. A tree takes the first W columns of each spine
token's row (specviz.drafters.tree's spine shape: level d holds the target's W best guesses after the spine's d-th
token, and the spine runs through the best one). The k steps run on the table's device; the ids come to the host
once (the chain is cut at the first empty row there).

Exactness. The proposal is a deterministic function of what the target computed in earlier passes, so q_draft is
one-hot on each drafted token (has_q = False) and the rule keeps it with probability p_target(x); siblings are
distinct (a row's top-K), so trees use the one-hot rule of distinct children. The output is the target's at every
temperature, and plain greedy at temperature 0. (Which earlier passes the table saw depends on earlier draws; the
rule only needs the proposal to be fixed before the round's own draws, which it is.)

Cost. A top-K over the pass's rows (handed over at the next draft phase, so it is timed as drafting), one
index_copy into the table, and k lookups: no model call. The table is V x K ids (49,152 x 8 int64: 3 MB for SmolLM2).
Its state is saved with a checkpoint or a saved run (keeps_state): the rejected drafts' rows cannot be rebuilt from
the committed text.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from specviz.core.protocols import Draft
from specviz.core.tree import TreeDraft
from specviz.drafters.tree import level_sizes, spine_tree

TOP = 8  # candidates kept per token (Token Recycling keeps the top 8)
FLUSH_ROWS = 256  # pending rows worth a top-K at once (a long prefill is folded in chunk by chunk)
EMPTY = -1  # a row the target has not read yet


class RecycleDrafter:
    """Drafts by following the table of the target's own top-K next tokens; one-hot q."""

    has_q = False
    can_branch = True
    reads_hidden = False
    reads_features = False
    reads_logits = True
    keeps_state = True

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", name: str = "token recycling", top: int = TOP) -> None:
        if vocab_size < 2 or not (1 <= top <= vocab_size):
            raise ValueError(f"Token recycling needs a vocabulary of at least 2 and 1..V candidates per token; got V={vocab_size}, K={top}.")
        self.vocab_size, self.top, self.name = vocab_size, top, name
        self.device = torch.device(device)  # the target's: the logits arrive there
        self.table = torch.full((vocab_size, top), EMPTY, dtype=torch.long, device=self.device)  # (V, K)
        self.pending: list[tuple[tuple[int, ...], torch.Tensor]] = []  # passes not folded in yet

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        self.table.fill_(EMPTY)
        self.pending = []

    def observe_logits(self, ids: Sequence[int], logits: torch.Tensor) -> None:
        """Keep a pass's rows (row i after ids[i]); folded into the table at the next proposal."""
        self.pending.append((tuple(int(i) for i in ids), logits))
        if sum(len(i) for i, _ in self.pending) >= FLUSH_ROWS:
            self.fold()

    def fold(self) -> None:
        """Write every pending pass into the table, in order: a token's row is the latest row that read it."""
        _fold(self.table, self.pending, self.top)
        self.pending = []

    def spine(self, newest: int, depth: int) -> torch.Tensor:
        """(depth + 1,) newest, then T[newest, 0], T[T[newest, 0], 0], ... on the device (EMPTY from the first
        unread token on); no host read."""
        x = torch.tensor([newest], dtype=torch.long, device=self.device)
        out = [x]
        for _ in range(depth):
            nxt = self.table[x.clamp_min(0), 0]
            x = torch.where(x < 0, x, nxt)
            out.append(x)
        return torch.cat(out)

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        """Up to k tokens along the table's first column; nothing when the newest token was never read."""
        if k <= 0 or not context:
            return Draft(())  # a plain round (k: auto's k = 0) folds nothing: the pending passes wait for a draft
        self.fold()
        chain = self.spine(int(context[-1]), k)[1:]  # (k,)
        ids = chain.tolist()  # the one transfer
        n = ids.index(EMPTY) if EMPTY in ids else len(ids)
        return Draft(tuple(ids[:n]), None, chain[:n])

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft:
        """Level d: the first ``width`` columns of the spine token's row (the spine's own token first)."""
        sizes = level_sizes(max(k, 0), min(width, self.top))
        if not sizes or not context:
            return TreeDraft((), ())
        self.fold()
        spine = self.spine(int(context[-1]), len(sizes) - 1)  # (D,) the tokens whose rows make the levels
        rows = self.table[spine.clamp_min(0), : max(sizes)]  # (D, W)
        rows = torch.where(spine[:, None] < 0, torch.full_like(rows, EMPTY), rows).tolist()  # the one transfer
        levels: list[tuple[list[int], torch.Tensor | None]] = []
        for row, size in zip(rows, sizes):
            if row[0] == EMPTY:
                break
            levels.append((row[:size], None))
        return spine_tree(levels)

    def rollback(self, committed: Sequence[int]) -> None:
        pass  # the table keeps what every pass showed, drafts included; nothing else is held

    def save_state(self) -> bytes:
        """The rows read so far, the pending passes' included: their tokens and top-K, as safetensors bytes. Leaves
        the pending passes pending (folded into a copy), so saving moves no work out of the next proposal."""
        table = self.table.clone()
        _fold(table, self.pending, self.top)
        filled = (table[:, 0] != EMPTY).nonzero().view(-1)
        return save_tensors({"tokens": filled.cpu().to(torch.int32), "rows": table[filled].cpu().to(torch.int32)},
                            metadata={"vocab_size": str(self.vocab_size), "top": str(self.top)})  # fmt: skip

    def load_state(self, data: bytes) -> None:
        """Back to a save_state(); ValueError when the bytes are not a table for this vocabulary."""
        try:
            saved = load_tensors(bytes(data))
        except Exception as exc:  # safetensors raises its own error types for junk
            raise ValueError(f"the recycling table is not readable ({type(exc).__name__})") from None
        tokens, rows = saved.get("tokens"), saved.get("rows")
        if tokens is None or rows is None or tokens.dim() != 1 or tuple(rows.shape) != (tokens.shape[0], self.top):
            raise ValueError(f"the recycling table does not fit {self.top} candidates per token")
        tokens, rows = tokens.long(), rows.long()
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size or int(rows.min()) < 0
                               or int(rows.max()) >= self.vocab_size):  # fmt: skip
            raise ValueError(f"the recycling table holds ids outside this vocabulary ({self.vocab_size} tokens)")
        self.pending = []
        self.table.fill_(EMPTY)
        self.table.index_copy_(0, tokens.to(self.device), rows.to(self.device))


def _fold(table: torch.Tensor, passes: list[tuple[tuple[int, ...], torch.Tensor]], top: int) -> None:
    """Write the passes' rows into table (V, K), in order: a token's row is the latest row that read it."""
    vocab = table.shape[0]
    for ids, logits in passes:
        last = {tok: row for row, tok in enumerate(ids) if 0 <= tok < vocab}  # the latest row per token
        if not last:
            continue
        rows = torch.tensor(list(last.values()), dtype=torch.long, device=logits.device)
        best = torch.topk(logits.index_select(0, rows).float(), top, dim=-1).indices  # (n, K)
        table.index_copy_(0, torch.tensor(list(last), dtype=torch.long, device=table.device), best.to(table.device))
