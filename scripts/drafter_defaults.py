"""Each drafter's defaults (k, tree width, draft vocabulary) re-derived from measured tables, never typed in by hand.

Reads `specviz bench` CSVs (assets/bench_cpu.csv, assets/bench_trees_cpu.csv) and the drafting tables of
scripts/medusa_check.py (assets/drafting_cpu.json: Medusa, EAGLE and token recycling with draft vocabularies;
assets/drafting_eagle_cpu.json: EAGLE's retrained head), and
prints specviz.drafters.specs.MEASURED_BEST (and PRIOR_ACCEPTANCE, the acceptance per draft position those runs imply,
auto k's prior); --write puts it into specs.py. tests/test_drafter_defaults.py checks
that the table there is what this script derives from the shipped files.

The rule, per drafter: use the first table given that compares two or more of its settings, so every setting
compared was measured in the same runs (a drafter measured at one setting only takes it from the first table). A cell is (temperature, category), its speedup the median over that
category's prompts. The best setting has the highest worst speedup on open text (the prose category and the open
paragraph, where a table has it; every cell where it has neither), where speculation pays least; ties go to the
higher mean over every cell, then to the smaller k. docs/benchmarks.md#each-drafters-defaults shows the result.

    python scripts/drafter_defaults.py            # print the table from the shipped files
    python scripts/drafter_defaults.py --write    # and write it into specviz/drafters/specs.py
    python scripts/drafter_defaults.py my_bench.csv assets/drafting_cpu.json   # from a new sweep
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specviz.core.auto_k import depth
from specviz.core.theory import expected_tokens
from specviz.drafters.specs import DRAFTER_KINDS, Tuning
from specviz.experiments.bench import read_bench

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = (ROOT / "assets" / "bench_cpu.csv", ROOT / "assets" / "drafting_eagle_cpu.json", ROOT / "assets" / "drafting_cpu.json",
           ROOT / "assets" / "bench_trees_cpu.csv")  # fmt: skip
# the main sweep first (both temperatures), then EAGLE's table on its retrained head (three prompts per category),
# then the drafting table (Medusa, recycling; one prompt per category), then the trees sweep (greedy only)
SPECS = ROOT / "specviz" / "drafters" / "specs.py"
OPEN_TEXT = ("prose", "paragraph")  # the categories where a drafter is judged by its worst cell
SETTING = ["drafter", "k", "tree_width", "draft_vocab"]
MEASURES = ["temperature", "category", "speedup", "tau", "alpha"]  # tau: tokens per target pass; alpha: from accepted/drafted
KIND_OF = {"n-gram": "ngram"}  # medusa_check's setup names -> drafter kinds (the rest are the kinds)
SETUP = re.compile(r"^(?P<drafter>[\w-]+) (?:chain |tree W=(?P<width>\d+) )?k=(?P<k>\d+)(?: V'=(?P<vocab>\d+)k)?$")
log = logging.getLogger("drafter_defaults")


@dataclass(frozen=True)
class Best:
    """A drafter's best setting and why: its worst open-text speedup and its mean over every cell, in its table."""

    tuning: Tuning
    source: str
    worst: float
    mean: float
    alpha: float = 0.5  # acceptance per draft position its runs imply (accepted/drafted, else tokens per pass): auto k's prior


def read_table(path: Path) -> pd.DataFrame:
    """One row per measured run: drafter, k, tree_width, draft_vocab, temperature, category, speedup."""
    if path.suffix == ".json":
        rows = []
        for r in json.loads(path.read_text(encoding="utf-8"))["rows"]:
            m = SETUP.match(r["setup"])
            if m is None or r["category"].startswith("mean of"):  # the baseline, and the script's own means
                continue
            rows.append(dict(drafter=KIND_OF.get(m["drafter"], m["drafter"]), k=int(m["k"]), tree_width=int(m["width"] or 1),
                             draft_vocab=int(m["vocab"] or 0) * 1024, temperature=float(r["T"]), category=r["category"],
                             speedup=float(r["speedup"]), tau=float(r["tau"]), alpha=float("nan")))  # fmt: skip
        return pd.DataFrame(rows, columns=SETTING + MEASURES)
    frame = read_bench(path)
    for column in ("tree_width", "draft_vocab"):  # older sweeps: chains over the full vocabulary
        if column not in frame:
            frame[column] = 1 if column == "tree_width" else 0
    frame["tree_width"] = frame["tree_width"].fillna(1).astype(int)
    frame["draft_vocab"] = frame["draft_vocab"].fillna(0).astype(int)
    frame["tau"] = frame["tokens_per_target_pass"] if "tokens_per_target_pass" in frame else float("nan")
    frame["alpha"] = frame["alpha_implied"] if "alpha_implied" in frame else float("nan")
    return frame[SETTING + MEASURES].dropna(subset=["speedup"])


def best_settings(paths: list[Path]) -> dict[str, Best]:
    """Each measured drafter's best setting, by the rule in the module docstring, in the drafter table's order."""
    tables = [(path.name, read_table(path)) for path in paths]
    found: dict[str, Best] = {}
    for drafter in [d for d in DRAFTER_KINDS if any((t["drafter"] == d).any() for _, t in tables)]:
        counts = [len(t[t["drafter"] == drafter].groupby(SETTING[1:])) for _, t in tables]
        source, table = tables[next((i for i, n in enumerate(counts) if n > 1), next(i for i, n in enumerate(counts) if n))]
        cells = table[table["drafter"] == drafter].groupby(SETTING[1:] + ["temperature", "category"])["speedup"].median().reset_index()
        open_text = cells[cells["category"].isin(OPEN_TEXT)] if cells["category"].isin(OPEN_TEXT).any() else cells
        worst = open_text.groupby(SETTING[1:])["speedup"].min()
        mean = cells.groupby(SETTING[1:])["speedup"].mean()
        k, width, vocab = max(worst.index, key=lambda s: (worst[s], mean[s], -s[0]))
        runs = table[(table["drafter"] == drafter) & (table["k"] == k) & (table["tree_width"] == width) & (table["draft_vocab"] == vocab)]
        alpha = runs["alpha"].median()  # from accepted/drafted (a round that drafted nothing is no evidence), else from tau
        alpha = round(float(alpha), 2) if alpha == alpha else implied_alpha(float(runs["tau"].median()), depth(int(k), int(width)))
        found[drafter] = Best(Tuning(int(k), int(width), int(vocab)), source, float(worst[(k, width, vocab)]), float(mean[(k, width, vocab)]), alpha)
    return found


def implied_alpha(tau: float, levels: int) -> float:
    """The per-position acceptance alpha with expected_tokens(alpha, levels) = tau (bisection); 0.5 when tau is unknown."""
    if not tau == tau or levels < 1:  # NaN: a table without tokens per pass
        return 0.5
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, levels) < tau else (lo, mid)
    return round((lo + hi) / 2, 2)


def render(best: dict[str, Best]) -> str:
    """The MEASURED_BEST block of specs.py, markers included."""
    lines = ["# BEGIN MEASURED_BEST: written by `python scripts/drafter_defaults.py --write`; tests/test_drafter_defaults.py checks it",
             "MEASURED_BEST: dict[str, Tuning] = {"]  # fmt: skip
    for kind, b in best.items():
        t = b.tuning
        lines.append(f'    "{kind}": Tuning({t.num_draft_tokens}, {t.tree_width}, {t.draft_vocab}),  '
                     f"# {b.source}: worst on open text {b.worst:.2f}x, mean {b.mean:.2f}x")  # fmt: skip
    lines += ["}", "PRIOR_ACCEPTANCE: dict[str, float] = {  # per draft position, implied by the same runs (auto k's prior)"]
    lines += [f'    "{kind}": {b.alpha},' for kind, b in best.items()]
    lines += ["}", "# END MEASURED_BEST"]
    return "\n".join(lines)


def write(block: str, specs: Path = SPECS) -> None:
    """Replace the MEASURED_BEST block of specs.py with ``block``."""
    text = specs.read_text(encoding="utf-8")
    start, end = text.index("# BEGIN MEASURED_BEST"), text.index("# END MEASURED_BEST") + len("# END MEASURED_BEST")
    specs.write_text(text[:start] + block + text[end:], encoding="utf-8")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tables", nargs="*", type=Path, default=list(SHIPPED), help="bench CSVs and medusa_check JSONs (default: the shipped ones)")
    p.add_argument("--write", action="store_true", help="write the table into specviz/drafters/specs.py")
    args = p.parse_args()
    block = render(best_settings(args.tables))
    print(block)
    if args.write:
        write(block)
        log.info("wrote %s", SPECS.relative_to(ROOT))


if __name__ == "__main__":
    main()
