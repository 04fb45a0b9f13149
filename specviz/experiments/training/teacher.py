"""Teacher-forced text, EAGLE's second data source: text the machine has offline (Python's standard library, its
docstrings and source, and the documentation and licence texts under /usr/share/doc and /usr/share/common-licenses),
cut into windows of ``window`` tokens. The target reads each window once (a forward pass, far cheaper than generating)
and its features and argmaxes are kept, packed like the own-text cache (training/own_text.py); windows are saved batch
by batch, so an interrupted run resumes, and every heldout_every-th window is held out.
"""

from __future__ import annotations

import gzip
import hashlib
import sysconfig
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specviz.experiments.training.config import EagleConfig
from specviz.experiments.training.own_text import is_held_out, pack, read_part, write_part
from specviz.experiments.training.save import save_atomic

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel

DOC_ROOTS = ("/usr/share/doc", "/usr/share/common-licenses")
MAX_DOC_CHARS = 40_000  # one document contributes at most this much text (variety over one long file)


def teacher_files(seed: int) -> list[Path]:
    """The offline text files, in a seeded order: the standard library's .py files, then docs and licences."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    for root in DOC_ROOTS:
        base = Path(root)
        if base.is_dir():
            files += sorted(p for p in base.rglob("*") if p.is_file() and _doc_name(p))
    order = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed)).tolist()
    return [files[i] for i in order]


def _doc_name(path: Path) -> bool:
    name = path.name.lower()
    return name == "copyright" or name.startswith(("readme", "news", "changelog")) or path.parent.name == "common-licenses" or name.endswith(".txt")


def teacher_documents(seed: int) -> Iterator[str]:
    """Documents in the seeded order, each distinct text once: a .py file gives its docstrings (prose) and its source
    (code) as two documents; a doc file its text (gzip read), at most MAX_DOC_CHARS of each."""
    import ast

    seen: set[str] = set()
    for path in teacher_files(seed):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        docs = [text]
        if path.suffix == ".py":
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                tree = None
            nodes = [] if tree is None else [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
            docstrings = [d for d in (ast.get_docstring(n) for n in nodes) if d]
            docs = ["\n\n".join(docstrings), text]
        for doc in docs:
            doc = doc.strip()[:MAX_DOC_CHARS]
            digest = hashlib.sha256(doc.encode()).hexdigest()
            if len(doc) >= 200 and digest not in seen:
                seen.add(digest)
                yield doc


def teacher_windows(tokenizer, seed: int, window: int, budget: int) -> Iterator[list[int]]:
    """Windows of window + 1 token ids (the last one only a label) until ``budget`` positions, from teacher_documents."""
    total = 0
    for doc in teacher_documents(seed):
        ids = tokenizer(doc, add_special_tokens=False, verbose=False)["input_ids"]
        for s in range(0, len(ids) - 1, window):
            piece = ids[s : s + window + 1]
            if len(piece) < 9:  # a stub
                continue
            yield piece
            total += len(piece) - 1
            if total >= budget:
                return


@torch.inference_mode()
def read_windows(lm: LoadedModel, windows: Sequence[Sequence[int]]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The target reads B windows (right-padded): per window ((T, H) float16 hidden states, (T,) argmax, (T,) the tokens
    that follow), T = its length - 1 (row t read token t, its label is token t + 1)."""
    model, dev = lm.model, lm.device
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    t = max(len(w) for w in windows) - 1
    ids = torch.tensor([list(w[:-1]) + [pad] * (t - len(w) + 1) for w in windows], dtype=torch.long, device=dev)  # (B, T)
    mask = torch.tensor([[1] * (len(w) - 1) + [0] * (t - len(w) + 1) for w in windows], dtype=torch.long, device=dev)
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False, logits_to_keep=1)
    hidden = out.hidden_states[-1]  # (B, T, H) post-norm
    lm_head = model.get_output_embeddings()
    rows = []
    for b, w in enumerate(windows):
        n = len(w) - 1
        argmax = lm_head(hidden[b, :n])[..., : lm.vocab_size].argmax(-1)  # (n,), one window's (n, V) at a time
        rows.append((hidden[b, :n].to(torch.float16).cpu(), argmax.cpu(), torch.tensor(list(w[1:]), dtype=torch.long)))
    return rows


def teacher_data(lm: LoadedModel, config: EagleConfig, cache_dir: Path, progress: bool = True) -> dict:
    """The teacher-forced windows as cached ({"train", "heldout"} packed like the own-text cache, "facts"), read first
    when missing: each batch of windows saved as it is read, so an interrupted run resumes."""
    from tqdm.auto import tqdm

    from specviz.models.medusa import target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    path = Path(cache_dir) / f"eagle-teacher-{config.teacher_key(fingerprint)}.pt"
    if path.is_file():
        return torch.load(path, map_location="cpu", weights_only=True)
    parts = Path(cache_dir) / f"eagle-teacher-parts-{config.teacher_key(fingerprint, with_budget=False)}"
    bar = tqdm(total=config.teacher_tokens, desc="reading offline text", unit="tok", disable=not progress)
    train, heldout, seconds, total, batch, n = [], [], 0.0, 0, [], 0
    windows = teacher_windows(lm.tokenizer, config.seed, config.window, config.teacher_tokens)
    while True:
        batch = [w for _, w in zip(range(config.gen_batch), windows)]
        if not batch:
            break
        part = parts / f"batch-{n:05d}.pt"
        saved = read_part(part)
        if saved is not None:
            rows, took = saved
        else:
            start = time.perf_counter()
            rows = read_windows(lm, batch)
            took = time.perf_counter() - start
            write_part(part, rows, took)
        for j, row in enumerate(rows):
            index = n * config.gen_batch + j
            (heldout if is_held_out(index, config.heldout_every) else train).append(row)
            total += row[0].shape[0]
            bar.update(row[0].shape[0])
        seconds, n = seconds + took, n + 1
    bar.close()
    facts = dict(windows=len(train) + len(heldout), positions=total, read_s=round(seconds, 1),
                 train_positions=sum(r[0].shape[0] for r in train), heldout_positions=sum(r[0].shape[0] for r in heldout))  # fmt: skip
    empty = dict(hidden=torch.zeros(0, lm.model.config.hidden_size, dtype=torch.float16), argmax=torch.zeros(0, dtype=torch.long),
                 tokens=torch.zeros(0, dtype=torch.long), lengths=[])  # fmt: skip
    cached = dict(train=pack(train) if train else empty, heldout=pack(heldout) if heldout else empty, facts=facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_atomic(cached, path)
    return cached

