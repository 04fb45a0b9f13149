"""What a training run writes: files saved atomically (a crash never leaves half a file), a heads folder replaced
whole, the training curve beside the weights, and the token counts a draft vocabulary is cut from with their coverage report."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

CURVE_FILE = "training_curve.json"


def save_atomic(obj: object, path: Path) -> None:
    """torch.save to a .tmp beside ``path``, then rename it into place."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


@contextmanager
def replaced_folder(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out`` to write a run's files into; once the writing succeeds it takes out's place (the
    files of out it lacks are copied over first), so ``out`` is never half written, even when the run read its
    starting head from there. A failed write leaves ``out`` as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        yield stage
        if out.is_dir():
            for old in out.iterdir():
                if not (stage / old.name).exists():
                    (shutil.copytree if old.is_dir() else shutil.copy2)(old, stage / old.name)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    stage.chmod(0o755)
    if not out.exists():
        stage.replace(out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent)) / out.name
    out.replace(aside)
    stage.replace(out)  # between the two renames the old folder is at ``aside``
    shutil.rmtree(aside.parent)


def write_curve(out: Path, curve: list[dict], evals: Sequence) -> None:
    """training_curve.json in ``out``: the per-step log and every held-out evaluation (dataclasses)."""
    data = dict(curve=curve, evals=[asdict(e) for e in evals])
    (Path(out) / CURVE_FILE).write_text(json.dumps(data) + "\n", encoding="utf-8")


def count_tokens(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(N,) token ids the target emitted -> (vocab_size,) int64 counts (ids past the vocabulary ignored)."""
    tokens = tokens[(tokens >= 0) & (tokens < vocab_size)]
    return torch.bincount(tokens, minlength=vocab_size)[:vocab_size].to(torch.int64)


def vocab_report(train_counts: torch.Tensor, heldout_counts: torch.Tensor, sizes: Sequence[int]) -> list[dict]:
    """Per V': the share of the training and of the held-out tokens inside the V' most counted training tokens."""
    from specviz.models.vocab import coverage, draft_vocab_ids

    rows = []
    for size in sizes:
        if size <= train_counts.shape[0]:
            ids = draft_vocab_ids(train_counts, size)
            rows.append(dict(size=size, train_coverage=round(coverage(train_counts, ids), 4), heldout_coverage=round(coverage(heldout_counts, ids), 4)))
    return rows


def write_token_counts(out: Path, train_tokens: torch.Tensor, heldout_tokens: torch.Tensor, vocab_size: int, source: str) -> list[dict]:
    """token_counts.safetensors in ``out`` from what the target emitted in the training data, and the coverage report
    (the held-out tokens measure how much of unseen text V' covers)."""
    from specviz.models.vocab import REPORTED_SIZES, save_token_counts

    counts, held = count_tokens(train_tokens, vocab_size), count_tokens(heldout_tokens, vocab_size)
    report = vocab_report(counts, held, REPORTED_SIZES)
    save_token_counts(out, counts, {"source": source, "positions": str(int(counts.sum())), "coverage": json.dumps(report)})
    return report
