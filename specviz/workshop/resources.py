"""What a server process keeps for all its sessions (models, shared views, the presentation watcher, locks), in
registries whose lifetime is the process's. Plain Python (threading), no streamlit.

Why not ``st.cache_resource``: Streamlit clears it, for the whole process, when any websocket client sends a
``clear_cache`` message, whatever the toolbar hides. With the models there, each clear loaded the model again
(about +550 MB a clear on a 2-core replica) and started one more presentation watcher thread, never stopped.
Nothing a participant sends reaches these registries: entries leave a Cache only by its own rules (LRU
past ``max_entries``, age past ``ttl_s``), and a singleton never leaves.

* ``Cache``: keyed, bounded (least recently used goes first), thread-safe, with single-flight builds: two sessions
  asking for the same key at once build it once, the second waits for the first. A failed build is not kept; its
  error reaches every session that waited for it (the next ask builds again).
* ``cached(...)``: the drop-in decorator for the UI's loaders, as ``st.cache_resource`` was used: the arguments are
  the key (those named with a leading underscore are left out, as Streamlit does), or ``key=`` computes it.
* ``singleton(key, build)``: one object per process and key, built once, never again (a watcher thread, a lock).

Values are shared by every session that asks: they must be read-only, or safe for concurrent use (a lock).
``reset_for_tests()`` empties every registry; nothing in the app calls it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
_ALL: weakref.WeakSet[Cache] = weakref.WeakSet()  # every registry of this process (reset_for_tests)
_ALL_LOCK = threading.Lock()


@dataclass
class _Flight:
    """One build in progress: the sessions that asked for the same key wait on ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    waiters: int = 0  # sessions waiting on it (tests gate on this)


class Cache:
    """A keyed, bounded, thread-safe cache with single-flight builds (module docstring).

    max_entries: keep at most this many (None: no bound); the least recently used entry goes first.
    ttl_s: an entry older than this is built again on the next ask (None: kept until evicted)."""

    def __init__(self, name: str, max_entries: int | None = None, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be at least 1 (or None); got {max_entries}.")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive (or None); got {ttl_s}.")
        self.name, self.max_entries, self.ttl_s, self._clock = name, max_entries, ttl_s, clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()  # key -> (value, built at)
        self._flights: dict[Hashable, _Flight] = {}
        self.builds = 0  # builds started (a failed one counts): what a test or a log line can check
        with _ALL_LOCK:
            _ALL.add(self)

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value for key, built by build() if it is not here (once, however many threads ask at the same time).
        Raises what build() raised, in the builder and in every thread that waited for it."""
        while True:
            with self._lock:
                found = self._fresh(key)
                if found is not None:
                    self._entries.move_to_end(key)
                    return found[0]
                flight = self._flights.get(key)
                builder = flight is None
                if builder:
                    flight = self._flights[key] = _Flight()
                    self.builds += 1
                else:
                    flight.waiters += 1
            if builder:
                return self._build(key, build, flight)
            flight.done.wait()
            if flight.error is None:
                return flight.value
            if isinstance(flight.error, Exception):
                raise flight.error
            # the builder's thread was stopped (KeyboardInterrupt, a script run stopped): not our failure, build again

    def _fresh(self, key: Hashable) -> tuple[Any, float] | None:
        """The entry for key unless it is missing or older than ttl_s (dropped then). Holds the lock."""
        entry = self._entries.get(key)
        if entry is not None and self.ttl_s is not None and self._clock() - entry[1] > self.ttl_s:
            del self._entries[key]
            return None
        return entry

    def _build(self, key: Hashable, build: Callable[[], T], flight: _Flight) -> T:
        try:
            value = build()
        except BaseException as exc:
            flight.error = exc
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()
            raise
        with self._lock:
            self._entries[key] = (value, self._clock())
            self._entries.move_to_end(key)
            while self.max_entries is not None and len(self._entries) > self.max_entries:
                evicted, _ = self._entries.popitem(last=False)
                log.info("%s: dropped the least recently used entry %r (max_entries %d)", self.name, evicted, self.max_entries)
            self._flights.pop(key, None)
        flight.value = value
        flight.done.set()
        return value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return self._fresh(key) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (tests; builds in flight finish for their waiters but are stored)."""
        with self._lock:
            self._entries.clear()


def _key_of(signature: inspect.Signature, args: tuple, kwargs: dict) -> tuple:
    """The call's arguments by name, defaults filled in, without those named with a leading underscore."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple((name, value) for name, value in bound.arguments.items() if not name.startswith("_"))


def cached(max_entries: int | None = None, ttl_s: float | None = None, key: Callable[..., Hashable] | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a loader: its calls share one Cache (named after the function) keyed by its arguments (leading
    underscore ones left out), or by key(*args, **kwargs) when given. The wrapper has .cache and .clear() (tests).

    The key's values must be hashable (an unhashable one is a TypeError saying so: give key=)."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        cache = Cache(f"{fn.__module__}.{fn.__qualname__}", max_entries, ttl_s)
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs) -> T:
            k = key(*args, **kwargs) if key is not None else _key_of(signature, args, kwargs)
            try:
                hash(k)
            except TypeError:
                raise TypeError(f"{cache.name}: its key {k!r} is not hashable; pass cached(key=...) to say what identifies a call.") from None
            return cache.get(k, lambda: fn(*args, **kwargs))

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.clear = cache.clear  # type: ignore[attr-defined]
        return wrapper

    return wrap


_SINGLETONS = Cache("specviz.workshop.resources.singletons")


def singleton(key: Hashable, build: Callable[[], T]) -> T:
    """The one object for key in this process: built by the first caller (the others wait for it), never rebuilt.
    For what must exist once per process: a thread started once, the lock every session takes."""
    return _SINGLETONS.get(key, build)


def reset_for_tests() -> None:
    """Empty every registry of this process. Tests only: a thread a singleton started keeps running."""
    with _ALL_LOCK:
        registries = list(_ALL)
    for cache in registries:
        cache.clear()
