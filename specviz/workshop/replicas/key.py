"""The presenter key a room hands its replicas: the owner's (the environment, or the [specviz] table of the secrets
files a replica's Streamlit reads), or, when none is set, a strong one made here and shown once on the room's
terminal (never in a log, the status file, a URL or a page). specviz.workshop.presenter_key holds the key's rules."""

from __future__ import annotations

import contextlib
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from specviz.workshop.presenter_key import generate_key, key_weakness, presenter_key


def secrets_files(repo: Path) -> list[Path]:
    """The secrets files a replica's Streamlit reads (its default secrets.files: the user's, then those of the app in
    repo, the checkout app.py lives in)."""
    return [Path.home() / ".streamlit" / "secrets.toml", repo / ".streamlit" / "secrets.toml"]


def secrets_table(files: Sequence[Path]) -> dict:
    """The [specviz] tables of the secrets files merged (a later file wins); a missing or broken file adds nothing."""
    table: dict = {}
    for path in files:
        try:
            with open(path, "rb") as f:
                found = tomllib.load(f).get("specviz", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if isinstance(found, dict):
            table.update(found)
    return table


def room_presenter_key(env: Mapping[str, str], files: Sequence[Path]) -> tuple[str | None, str]:
    """(a key to give the replicas, or None; what to tell the owner): None with a warning when the owner's key is
    too weak (presenting stays off), None and "" when the owner set a usable one, a new key when none is set."""
    configured = presenter_key(env, secrets_table(files))
    if configured is None:
        return generate_key(), ""
    weakness = key_weakness(configured)
    if weakness is not None:
        return None, f"warning: the presenter key set for this room is too weak, so presenting is off ({weakness}). Unset it and the room makes a strong one."
    return None, ""


@contextlib.contextmanager
def terminal() -> Iterator[TextIO | None]:
    """This process's terminal (stderr when it is one, else /dev/tty), or None: a generated key is shown there only,
    never in a file the output may be redirected to."""
    if sys.stderr.isatty():
        yield sys.stderr
        return
    try:
        tty = open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115  (closed below)
    except OSError:
        yield None
        return
    try:
        yield tty
    finally:
        tty.close()
