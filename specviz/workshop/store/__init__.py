"""The room's store: one interface (interface.py: read its docstring first), two backends (directory.py, the default;
redis_store.py), and open_store, which picks one from the environment (SPECVIZ_STORE)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from specviz.workshop.store.interface import LOCK_TIMEOUT_S, Entry, Store, StoreUnavailable, Watch, check_name

__all__ = ["LOCK_TIMEOUT_S", "STORE_ENV", "Entry", "Store", "StoreUnavailable", "Watch", "check_name", "default_run_dir", "open_store"]

STORE_ENV = "SPECVIZ_STORE"


def default_run_dir(env: Mapping[str, str] | None = None) -> Path:
    """SPECVIZ_RUN_DIR, else ``runs`` under the cache directory (the rule of specviz.models.loading.cache_root)."""
    env = os.environ if env is None else env
    if env.get("SPECVIZ_RUN_DIR"):
        return Path(env["SPECVIZ_RUN_DIR"]).expanduser()
    root = env.get("SPECVIZ_CACHE_DIR") or os.path.join(env.get("XDG_CACHE_HOME", "~/.cache"), "specviz")
    return Path(root).expanduser() / "runs"


def open_store(env: Mapping[str, str] | None = None, root: str | os.PathLike | None = None) -> Store:
    """The room's store: SPECVIZ_STORE (``redis://`` or ``rediss://``), else the directory root (default: the run
    directory, SPECVIZ_RUN_DIR). Raises ValueError naming a bad setting; connects lazily (ping() to check)."""
    env = os.environ if env is None else env
    url = (env.get(STORE_ENV) or "").strip()
    if not url:
        from specviz.workshop.store.directory import DirectoryStore

        return DirectoryStore(default_run_dir(env) if root is None else Path(root))
    if url.startswith(("redis://", "rediss://")):
        from specviz.workshop.store.redis_store import redis_store

        return redis_store(url)
    raise ValueError(f"{STORE_ENV} must be a redis:// or rediss:// URL (unset: the run directory); got {_hide_password(url)!r}.")


def _hide_password(url: str) -> str:
    """A URL with any password replaced by ***, for messages."""
    return re.sub(r"(//[^/@]*:)[^/@]*@", r"\1***@", url)[:200]

