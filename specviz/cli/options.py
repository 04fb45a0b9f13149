"""RunConfig <-> argparse: the run options `generate` takes (each a field of RunConfig's table, specviz.config.FIELDS,
with its flag, default and help, so the CLI and the app agree), the config they make, and the small argument types
and checks several subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specviz.config import RunConfig, Setting, settings_of
from specviz.drafters.specs import TUNED_FIELDS, drafter_spec

__all__ = [
    "MODEL_ACCESS", "MODEL_OPTIONS", "add_run_options", "batch_sizes_arg", "check_output_file", "config_from_args", "csv_list",
    "model_access", "run_fields", "run_values", "set_threads", "tuned_values",
]  # fmt: skip


TUNED_HELP = "default: the drafter's measured best, docs/benchmarks.md#each-drafters-defaults"


def add_run_options(
    p: argparse.ArgumentParser,
    config_cls: type[RunConfig] = RunConfig,
    *,
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    differ: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """One flag per field of the config's table that has one (specviz.config.FIELDS), with its default and help: every
    field (generate), or `only` those fields, less `skip`. The fields a drafter's defaults set (k, tree width, draft
    vocabulary) default to None: the drafter's measured best. `differ` is the one place a subcommand says where its flag
    legitimately differs from the table's (field -> argparse keywords, e.g. train-heads' --device default "cpu")."""
    rows = run_fields(config_cls, only, skip)
    differ = differ or {}
    if set(differ) - {s.name for s in rows}:
        raise ValueError(f"differ names fields this parser does not take: {sorted(set(differ) - {s.name for s in rows})}")
    for s in rows:
        options: dict = {"help": s.flag_help}
        if s.type is bool:
            options["action"] = "store_true"
        elif s.name in TUNED_FIELDS:
            options.update(default=None, metavar=s.metavar, type=s.type, help=f"{s.flag_help}; {TUNED_HELP}" if s.flag_help else TUNED_HELP)
        else:
            options.update(default=s.default, metavar=s.metavar, choices=s.choices)
            if s.type is not str:
                options["type"] = s.type
        action = p.add_argument(*s.flags, **(options | dict(differ.get(s.name, {}))))
        action.field, action.differs = s.name, tuple(sorted(differ.get(s.name, {})))  # read by tests/test_cli_options.py


def run_fields(config_cls: type[RunConfig] = RunConfig, only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[Setting]:
    """The rows of the field table that add_run_options makes flags of, in the table's order. ValueError for a name
    that is not a field with a flag (a typo in `only` or `skip` must not pass silently)."""
    rows = [s for s in settings_of(config_cls) if s.flags]
    named = {s.name for s in rows}
    wanted, skipped = (named if only is None else set(only)), set(skip)
    unknown = (wanted | skipped) - named
    if unknown:
        raise ValueError(f"{', '.join(sorted(unknown))}: not a {config_cls.__name__} field with a flag")
    return [s for s in rows if s.name in wanted and s.name not in skipped]


def run_values(args: argparse.Namespace, config_cls: type[RunConfig] = RunConfig, only: Iterable[str] | None = None,
               skip: Iterable[str] = ()) -> dict[str, Any]:
    """What add_run_options' flags (the same only and skip) said, as the config's keyword arguments: a negated flag
    (--no-chat, --fixed-k) turned back into its field's value. k, tree width and draft vocabulary may be None here:
    tuned_values fills them in."""
    values = {}
    for s in run_fields(config_cls, only, skip):
        value = getattr(args, s.flags[0].lstrip("-").replace("-", "_"))
        values[s.name] = (not value) if s.negated else value
    return values


def config_from_args(args: argparse.Namespace, config_cls: type[RunConfig] = RunConfig) -> RunConfig:
    """The config the run options say (a field without a flag keeps its default; k, tree width and draft vocabulary
    not given take the drafter's measured best)."""
    values = run_values(args, config_cls)
    values |= tuned_values(values.get("drafter", config_cls.drafter), **{n: values[n] for n in TUNED_FIELDS if n in values})
    return config_cls(**values)


def tuned_values(drafter: str, **given: int | None) -> dict[str, int]:
    """k, tree width and draft vocabulary for a drafter: each value given (not None) as it is, the rest the drafter's
    measured best (specviz.drafters.specs.MEASURED_BEST)."""
    best = drafter_spec(drafter).defaults
    return {name: getattr(best, name) if given.get(name) is None else given[name] for name in TUNED_FIELDS}


MODEL_ACCESS = ("trust_remote_code", "allow_download", "allow_pickle")  # RunConfig fields every model-loading command takes
MODEL_OPTIONS = ("target", "device", "dtype", *MODEL_ACCESS)  # what a command that loads a target takes, at the least


def model_access(args: argparse.Namespace) -> dict[str, bool]:
    """What the model-access flags said, as load_model's keyword arguments."""
    return run_values(args, only=MODEL_ACCESS)


def batch_sizes_arg(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): the batch sizes --batch takes."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are whole numbers separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be at least 1; got {text!r}")
    return sizes


def csv_list(text: str, cast, what: str) -> tuple:
    try:
        items = tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list, e.g. 2,4,8; got {text!r}.") from exc
    if not items:
        raise argparse.ArgumentTypeError(f"{what} must not be empty.")
    return items


def check_output_file(path: str, flag: str) -> None:
    """Fail at once, with a message naming the flag, where a file cannot be written at path (a folder, a missing or
    non-folder parent, no permission); a file created to find out is removed again."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name, e.g. {target / 'run.json'}.")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {parent} {'is not a folder' if parent.exists() else 'does not exist'}; create it first.")
    existed = target.exists()
    try:
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path} cannot be written: {exc.strerror or exc}.") from None
    if not existed:
        target.unlink()


def set_threads(threads: int | None) -> None:
    """--threads: torch's CPU threads for this process (None: torch's choice)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads must be at least 1; got {threads}.")
    import torch

    torch.set_num_threads(threads)
