"""The process's registries (specviz.workshop.resources): single-flight builds (a known-bad cache without them builds
twice in the same race), failed builds reach every waiter and are not kept, LRU and age bounds, the decorator's key,
one singleton per process; and the app's loaders survive what Streamlit's clear_cache message does, while a function
cached with st.cache_resource (the known-bad control) does not."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specviz.workshop import resources
from specviz.workshop.resources import Cache, cached, singleton
from specviz.workshop.store.directory import DirectoryStore

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 30


def race(get, build_started: threading.Event, release: threading.Event, waiting) -> list:
    """Two threads ask for the same key: the first builds (and blocks in its build until released); the second asks
    while that build is in flight. Returns both results (or exceptions)."""
    results: list = [None, None]

    def ask(i: int) -> None:
        try:
            results[i] = get()
        except Exception as exc:
            results[i] = exc

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    assert build_started.wait(WAIT_S)
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    assert waiting(second), "the second ask never got to wait"
    release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    return results


class SlowBuild:
    """A build that says when it started and blocks until released; counts its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.calls, self.started, self.release, self.fail = 0, threading.Event(), threading.Event(), fail

    def __call__(self):
        self.calls += 1
        self.started.set()
        assert self.release.wait(WAIT_S)
        if self.fail:
            raise ValueError("the model does not fit")
        return object()


def waits_on(cache: Cache, key):
    """True once a second thread waits on the flight for key (the cache's own count)."""

    def check(thread: threading.Thread) -> bool:
        done = threading.Event()
        for _ in range(int(WAIT_S / 0.01)):
            with cache._lock:
                flight = cache._flights.get(key)
                if flight is not None and flight.waiters:
                    return True
            if not thread.is_alive():
                return False
            done.wait(0.01)
        return False

    return check


def test_two_asks_at_once_build_once_and_share_the_value():
    cache, build = Cache("test"), SlowBuild()
    a, b = race(lambda: cache.get("model", build), build.started, build.release, waits_on(cache, "model"))
    assert build.calls == 1 and a is b and a is not None
    assert cache.get("model", build) is a and build.calls == 1


def test_known_bad_a_cache_without_single_flight_builds_twice_in_the_same_race():
    """The same race against check-then-build (what a plain dict gives): two builds. The harness can see a double load."""
    store, build = {}, SlowBuild()
    second_asked, asks = threading.Event(), []

    def naive():
        asks.append(1)
        if len(asks) == 2:
            second_asked.set()
        if "model" not in store:
            store["model"] = build()
        return store["model"]

    race(naive, build.started, build.release, lambda thread: second_asked.wait(WAIT_S))
    assert build.calls == 2


def test_a_failed_build_reaches_every_waiter_and_is_not_kept():
    cache, build = Cache("test"), SlowBuild(fail=True)
    a, b = race(lambda: cache.get("model", build), build.started, build.release, waits_on(cache, "model"))
    assert isinstance(a, ValueError) and isinstance(b, ValueError) and "does not fit" in str(b)
    assert build.calls == 1 and "model" not in cache and len(cache) == 0
    assert cache.get("model", lambda: "loaded now") == "loaded now"  # the next ask builds again


def test_a_stopped_builder_leaves_the_waiter_to_build_itself():
    cache = Cache("test")
    started, release = threading.Event(), threading.Event()

    def interrupted():
        started.set()
        assert release.wait(WAIT_S)
        raise KeyboardInterrupt  # a BaseException: the builder's thread was stopped, not the build's fault

    results: list = []

    def builder():
        try:
            cache.get("k", interrupted)
        except KeyboardInterrupt:
            results.append("stopped")

    t = threading.Thread(target=builder)
    t.start()
    assert started.wait(WAIT_S)
    waiter = threading.Thread(target=lambda: results.append(cache.get("k", lambda: "built by the waiter")))
    waiter.start()
    assert waits_on(cache, "k")(waiter)
    release.set()
    t.join(WAIT_S)
    waiter.join(WAIT_S)
    assert sorted(results) == ["built by the waiter", "stopped"]


def test_least_recently_used_goes_first_and_old_entries_are_built_again():
    cache = Cache("test", max_entries=2)
    for key in ("a", "b"):
        cache.get(key, lambda key=key: key.upper())
    cache.get("a", lambda: "again")  # a is now the most recent
    cache.get("c", lambda: "C")
    assert "a" in cache and "c" in cache and "b" not in cache and len(cache) == 2

    now = [0.0]
    aged = Cache("test", ttl_s=300, clock=lambda: now[0])
    assert aged.get("profiles", lambda: 1) == 1
    now[0] = 299
    assert aged.get("profiles", lambda: 2) == 1
    now[0] = 301
    assert aged.get("profiles", lambda: 3) == 3 and aged.builds == 2


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_entries"):
        Cache("test", max_entries=0)
    with pytest.raises(ValueError, match="ttl_s"):
        Cache("test", ttl_s=0)


def test_the_decorator_keys_on_arguments_but_not_leading_underscore_ones():
    built = []

    @cached(max_entries=4)
    def view(_model, name: str, layer: int = 2):
        built.append((name, layer))
        return (id(_model), name, layer)

    first = view(object(), "smol", 2)
    assert view(object(), "smol") is first  # another _model, the default layer: the same key
    view(object(), name="smol", layer=3)
    assert built == [("smol", 2), ("smol", 3)] and len(view.cache) == 2
    view.clear()
    assert len(view.cache) == 0


def test_the_decorator_takes_a_key_function_and_refuses_unhashable_keys():
    @cached(key=lambda pid, version, saved: (pid, version, len(saved)))
    def shared_view(pid, version, saved):
        return list(saved)

    assert shared_view("p", 1, [1, 2]) is shared_view("p", 1, [3, 4])  # the key says: same length, same view

    @cached()
    def by_list(items):
        return items

    with pytest.raises(TypeError, match="not hashable"):
        by_list([1, 2])


def test_a_singleton_is_built_once_per_process_and_reset_only_for_tests():
    builds = []
    barrier = threading.Barrier(8)

    def ask():
        barrier.wait(WAIT_S)
        return singleton(("test-watcher", "/runs"), lambda: builds.append(1) or threading.Lock())

    out: list = []
    threads = [threading.Thread(target=lambda: out.append(ask())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(builds) == 1 and len({id(x) for x in out}) == 1
    resources.reset_for_tests()
    assert singleton(("test-watcher", "/runs"), threading.Lock) is not out[0]


def test_no_ui_module_keeps_process_state_in_st_cache_resource():
    """Streamlit clears st.cache_resource for the whole process on any client's clear_cache message."""
    users = [str(p.relative_to(REPO)) for p in [*(REPO / "specviz").rglob("*.py"), *(REPO / "pages").glob("*.py"), REPO / "app.py"]
             if "cache_resource(" in p.read_text(encoding="utf-8") and p.name != "resources.py"]  # fmt: skip
    assert users == []


def test_what_clear_cache_clears_leaves_the_models_and_the_watcher(monkeypatch, tmp_path):
    """What AppSession._handle_clear_cache_request calls (cache_data.clear, cache_resource.clear), run here: the
    model cache, the watcher and the redraw lock stay; a function cached with st.cache_resource is cleared (the
    known-bad control: this test sees a clear)."""
    import streamlit as st
    from streamlit.runtime import caching

    from specviz.ui.common import models as ui_models
    from specviz.ui.room import follow

    monkeypatch.setattr(ui_models, "check_fits", lambda source, device: None)
    monkeypatch.setattr(ui_models, "freeze_long_lived", lambda: None)
    loads = []
    monkeypatch.setattr(ui_models, "load_model", lambda *args, **kwargs: loads.append(args) or object())
    ui_models._cached_model.clear()

    @st.cache_resource
    def streamlit_cached() -> object:
        return object()

    try:
        model = ui_models._cached_model("tiny-for-clear-test", "cpu", "float32", False, False, False)
        watcher, lock, control = follow._process_watcher(DirectoryStore(tmp_path)), follow._redraw_lock(), streamlit_cached()
        caching.cache_data.clear()
        caching.cache_resource.clear()
        assert ui_models._cached_model("tiny-for-clear-test", "cpu", "float32", False, False, False) is model and len(loads) == 1
        assert follow._process_watcher(DirectoryStore(tmp_path)) is watcher and follow._redraw_lock() is lock
        assert streamlit_cached() is not control, "the control: st.cache_resource is cleared by the same calls"
    finally:
        ui_models._cached_model.clear()
