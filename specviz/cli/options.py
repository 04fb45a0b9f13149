"""RunConfig <-> argparse: the run options `generate` takes (each a field of RunConfig's table, specviz.config.FIELDS,
with its flag, default and help, so the CLI and the app agree), the config they make, and the small argument types
and checks several subcommands share."""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz.config import DTYPE_HELP, RunConfig, settings_of
from specviz.drafters.specs import TUNED_FIELDS, drafter_spec

__all__ = [
    "DTYPE_HELP", "MODEL_ACCESS", "add_model_access", "add_run_options", "batch_sizes_arg", "check_output_file", "config_from_args",
    "csv_list", "model_access", "set_threads", "tuned_values",
]  # fmt: skip


TUNED_HELP = "default: the drafter's measured best, docs/benchmarks.md#each-drafters-defaults"


def add_run_options(p: argparse.ArgumentParser, config_cls: type[RunConfig] = RunConfig) -> None:
    """One flag per field of the config's table that has one (specviz.config.FIELDS), with its default and help. The
    fields a drafter's defaults set (k, tree width, draft vocabulary) default to None: the drafter's measured best."""
    for s in settings_of(config_cls):
        if not s.flags:
            continue
        options: dict = {"help": s.flag_help}
        if s.type is bool:
            options["action"] = "store_true"
        elif s.name in TUNED_FIELDS:
            options.update(default=None, metavar=s.metavar, type=s.type, help=f"{s.flag_help}; {TUNED_HELP}" if s.flag_help else TUNED_HELP)
        else:
            options.update(default=s.default, metavar=s.metavar, choices=s.choices)
            if s.type is not str:
                options["type"] = s.type
        p.add_argument(*s.flags, **options)


def config_from_args(args: argparse.Namespace, config_cls: type[RunConfig] = RunConfig) -> RunConfig:
    """The config the run options say (a field without a flag keeps its default; k, tree width and draft vocabulary
    not given take the drafter's measured best)."""
    values = {}
    for s in settings_of(config_cls):
        if s.flags:
            value = getattr(args, s.flags[0].lstrip("-").replace("-", "_"))
            values[s.name] = (not value) if s.negated else value
    values |= tuned_values(values.get("drafter", config_cls.drafter), **{n: values[n] for n in TUNED_FIELDS if n in values})
    return config_cls(**values)


def tuned_values(drafter: str, **given: int | None) -> dict[str, int]:
    """k, tree width and draft vocabulary for a drafter: each value given (not None) as it is, the rest the drafter's
    measured best (specviz.drafters.specs.MEASURED_BEST)."""
    best = drafter_spec(drafter).defaults
    return {name: getattr(best, name) if given.get(name) is None else given[name] for name in TUNED_FIELDS}


MODEL_ACCESS = ("trust_remote_code", "allow_download", "allow_pickle")  # RunConfig fields every model-loading command takes


def add_model_access(p: argparse.ArgumentParser) -> None:
    """The model-access flags of a subcommand that loads models without a whole RunConfig (bench, batch, profile,
    serve, train-heads): the same flags and help as `generate`'s, from their rows of the field table."""
    rows = {s.name: s for s in settings_of(RunConfig)}
    for name in MODEL_ACCESS:
        p.add_argument(*rows[name].flags, action="store_true", help=rows[name].flag_help)


def model_access(args: argparse.Namespace) -> dict[str, bool]:
    """What add_model_access's flags said, as load_model's keyword arguments."""
    return {name: getattr(args, name) for name in MODEL_ACCESS}


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
