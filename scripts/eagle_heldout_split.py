"""EAGLE heads' held-out first-draft-token accuracy, split by kind of text: the target's own continuations (the kind of
text the app drafts) and the teacher-forced offline text, each head scored on the same positions. The gate's measure
(`train-heads --kind eagle`) pools the two; this says which one a training stage moved (docs/eagle-head.md).

    python scripts/eagle_heldout_split.py                                   # the shipped head, on its own data recipe
    python scripts/eagle_heldout_split.py OLD_HEAD_DIR assets/eagle_smollm2_135m --recipe-of assets/eagle_smollm2_135m

The data recipe (how much own and offline text, the seed, ...) is read from --recipe-of's config.json (default: the
first head's), so the held-out set is the one that head's training scored. It reads the training command's caches
under --cache-dir; where they are missing it makes them first, as train-heads does (the better part of an hour on a
2-core CPU). Untimed: any machine load will do.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

import torch

from specviz.config import EMBEDDED_TARGET
from specviz.experiments.training import eagle
from specviz.experiments.training.config import EagleConfig
from specviz.experiments.training.own_text import cached_data
from specviz.experiments.training.teacher import teacher_data
from specviz.models import load_model
from specviz.models.eagle import EagleShape, load_eagle
from specviz.models.loading import cache_root
from specviz.models.medusa import target_fingerprint

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "eagle_smollm2_135m"


def recipe(folder: Path) -> EagleConfig:
    """The EagleConfig a head's training ran with (its config.json's training.config), for the fields EagleConfig has."""
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))["training"]["config"]
    fields = {f.name for f in dataclasses.fields(EagleConfig)}
    return EagleConfig(**{k: v for k, v in saved.items() if k in fields})


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("heads", nargs="*", default=[str(SHIPPED)], help="EAGLE head folders (default: the shipped head)")
    p.add_argument("--recipe-of", default=None, help="the head whose data recipe sets the held-out set (default: the first)")
    p.add_argument("--cache-dir", default=None, help="the training caches (default: specviz's cache, as train-heads)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    config = recipe(Path(args.recipe_of or args.heads[0]))
    lm = load_model(EMBEDDED_TARGET, "cpu", "float32")
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else cache_root() / "medusa"
    own = cached_data(lm, config, cache, progress=True)
    teacher = teacher_data(lm, config, cache, progress=True) if config.teacher_tokens else None
    data = eagle.load_or_make_eagle_data(lm, config, cache, progress=False)
    parts = {"the target's own continuations": eagle.Sequences.join(own["heldout"])}
    if teacher is not None:
        parts["teacher-forced offline text"] = eagle.Sequences.join(teacher["heldout"])
    parts["both (the gate's measure)"] = data.heldout
    frozen, draft_ids = eagle.frozen_parts(lm, config, data.train), eagle.draft_ids_of(data, config.draft_vocab)
    fingerprint, shape = target_fingerprint(lm.model.get_input_embeddings().weight), EagleShape.of_target(lm.model.config)
    print(f"held-out first-draft-token top-1 (full vocabulary; the draft vocabulary's {config.draft_vocab:,} in brackets)")
    print("| held-out text | positions | " + " | ".join(args.heads) + " |")
    print("| --- | ---: |" + " ---: |" * len(args.heads))
    heads = [load_eagle(Path(h), shape, fingerprint, lm.name).float().eval() for h in args.heads]
    for name, seqs in parts.items():
        scores = [eagle.evaluate(head, frozen, seqs, config, 0, None, draft_ids) for head in heads]
        cells = [
            f"{s.top1:.3f} ({s.top1_draft_vocab:.3f})" if s.top1_draft_vocab is not None else f"{s.top1:.3f}" for s in scores
        ]
        print(f"| {name} | {scores[0].positions:,} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
