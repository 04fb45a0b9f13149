"""The harness: one room and what watches it (the victim stepping on r1, the sampler reading every replica's RSS and
threads), the session helpers every attack uses, and a presenter on r2 with its followers."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import (
    KEY_BENCH_NEW,
    KEY_BENCH_PER_CATEGORY,
    KEY_BENCH_REPEATS,
    KEY_FOLLOW,
    KEY_PRESENT,
    KEY_PRESENT_KEY,
    KEY_RESET,
    KEY_STEP,
    KEY_STOP_PRESENT,
    ROUNDS_METRIC,
    STEP_PAGE,
)
from specviz.loadtest.attacks.goals import FOLLOWER_P95_S, ProcSample, StepSample, redraw_stats
from specviz.loadtest.presenter import PRESENTER, Follower, follow, redraw_latencies
from specviz.loadtest.protocol import SIDEBAR, StSession
from specviz.loadtest.room import RoomHandle, pin_replica

ATTACKER_SOURCE = "127.0.0.66"  # every 127.x.y.z is this machine (Linux): two addresses, two clients
VICTIM_SOURCE = "127.0.0.10"
NEWCOMER_SOURCE = "127.0.0.77"  # a third participant: asks for memory the attacker holds (kv-hog)
VICTIM_QUERY = {"prompt": "Write a Python function that reverses a string.", "drafter": "ngram", "seed": "7", "max_new_tokens": "64"}
REPLICA_A, REPLICA_B = "r1", "r2"  # the victim's and attackers' replica; the presenter's
VICTIM_TIMEOUT_S = 300.0  # a Step still unanswered after this counts as failed (the server gives up at 120 s)
SAMPLE_EVERY_S = 0.5


@dataclass
class Config:
    """The sizes of every attack (full run, or --quick)."""

    victim_every_s: float = 1.0
    attack_s: float = 300.0  # the longest an attacker's one click is waited for
    settle_s: float = 300.0
    baseline_s: float = 20.0
    lab_chars: int = 3000
    step_chars: int = 2000
    clears: int = 20
    followers: int = 6
    presenter_steps: int = 8
    think_s: float = 3.0
    guess_s: float = 60.0
    guess_threads: tuple[int, ...] = (1, 4)
    memory_sessions: int = 10
    memory_s: float = 120.0
    max_prompt_tokens: int = 1024
    flood_s: float = 20.0
    spam_s: float = 20.0
    spam_per_s: float = 20.0
    k_rounds: int = 12
    frame_names: int = 1_000_000  # names in the attackers' file_urls_request (unbounded, a 2 MB frame held a replica 14 s)
    upload_puts: int = 20  # PUTs under made-up ids, and minted ones past the caps
    upload_mb: int = 10  # each PUT's body
    hog_sessions: int = 8  # the most sessions the kv-hog opens (it stops at the first the budget refuses)
    races: int = 3  # races back to back
    race_new_tokens: int = 256  # each race's max new tokens (the shared default)
    serve_slow_conns: int = 48  # slowloris connections to `specviz serve` (its cap: 64 connections)
    serve_hold_s: float = 40.0  # how long they, and a stream nobody reads, are held (the server's deadlines: 30 s)
    conn_over: int = 10  # connections over the room's per-source limit
    guess_clicks: int = 200  # one session's guesses in the room exercise
    sweep: dict = field(default_factory=lambda: {KEY_BENCH_PER_CATEGORY: 2, KEY_BENCH_REPEATS: 5, KEY_BENCH_NEW: 128})

    @classmethod
    def quick(cls) -> Config:
        return cls(
            victim_every_s=1.0, attack_s=120.0, settle_s=60.0, baseline_s=3.0, lab_chars=100, step_chars=60, clears=2, followers=2, presenter_steps=2,
            think_s=1.5, guess_s=4.0, memory_sessions=2, memory_s=4.0, max_prompt_tokens=128, flood_s=3.0, spam_s=2.0, k_rounds=3,
            frame_names=1000, upload_puts=2, upload_mb=1, races=1, race_new_tokens=16, serve_slow_conns=4, serve_hold_s=3.0, guess_clicks=6,
            sweep={KEY_BENCH_PER_CATEGORY: 1, KEY_BENCH_REPEATS: 1, KEY_BENCH_NEW: 8},
        )  # fmt: skip


@dataclass
class Harness:
    """One running room and what watches it."""

    handle: RoomHandle
    run_dir: Path
    key: str
    cfg: Config
    env: dict[str, str]  # the owner's settings this room started with
    samples: list[ProcSample] = field(default_factory=list)
    victim: Victim | None = None

    @property
    def url(self) -> str:
        return self.handle.url

    def session(self, query: dict[str, str] | str | None = None, page: str = STEP_PAGE, replica: str | None = REPLICA_A, timeout_s: float = VICTIM_TIMEOUT_S,
                headers: dict | None = None, source: str = ATTACKER_SOURCE) -> StSession:  # fmt: skip
        """A participant's session; source: the loopback address it connects from (the balancer passes it on as the
        client's address), so the attacker and the victim are two clients, as two people in a room are."""
        s = StSession(self.url, query, timeout_s=timeout_s, page=page, headers=headers, source=source)
        return pin_replica(s, replica) if replica else s

    def presentations(self):
        from specviz.workshop.presentation import PresentationStore

        return PresentationStore(self.run_dir)

    def replica_ids(self) -> list[str]:
        return [r["id"] for r in (self.handle.status() or {}).get("replicas", [])]


def rounds(session: StSession) -> int:
    """The step-through page's rounds metric as a number (0 when none is drawn)."""
    digits = re.sub(r"\D", "", session.metric(ROUNDS_METRIC) or "")
    return int(digits) if digits else 0


def run_token(session: StSession) -> str | None:
    """The run token the page put in its URL (?run=...)."""
    return (urllib.parse.parse_qs(session.query).get("run") or [None])[0]


def own_run(session: StSession) -> None:
    """A page that follows the presenter goes back to its own run (the victim and the attackers are not followers)."""
    if session.has_widget(KEY_FOLLOW):
        session.set_widget(KEY_FOLLOW, False)


def drain(session: StSession) -> None:
    """Read any run the server pushed meanwhile, so the next click reads its own run."""
    while session.wait_for_run(timeout_s=0.01) is not None:
        pass


def messages(session: StSession, sidebar_only: bool = False) -> list[str]:
    """Errors and warnings on the page (alerts), the sidebar's only when asked."""
    from streamlit.proto.Alert_pb2 import Alert

    return [n.proto.alert.body for n in session.elements("alert") if n.proto.alert.format in (Alert.ERROR, Alert.WARNING) and (not sidebar_only or n.path[0] == SIDEBAR)]


def sidebar_alerts(session: StSession) -> list[str]:
    """Every alert in the sidebar (where the presenter's messages are), whatever its kind."""
    return [n.proto.alert.body[:160] for n in session.elements("alert") if n.path[0] == SIDEBAR]


def first_message(session: StSession) -> str | None:
    said = messages(session) + session.exceptions()
    return said[0][:160].replace("\n", " ") if said else None


class Victim:
    """Another participant: Step about every `every_s` on r1's step-through page for as long as the room runs."""

    def __init__(self, h: Harness, every_s: float) -> None:
        self.h, self.every_s = h, every_s
        self.samples: list[StepSample] = []
        self.token: str | None = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="victim")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=VICTIM_TIMEOUT_S + 30)

    def warm(self, timeout_s: float, steps: int = 2) -> None:
        """Wait until the victim made `steps` Steps (the first loads the model and starts the replica's threads)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.samples) < steps:
            time.sleep(0.2)

    def settle(self, since: float, timeout_s: float) -> float:
        """Wait until a Step clicked after `since` was drawn (or failed), at most timeout_s; returns when."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not any(s.t >= since for s in self.samples):
            time.sleep(0.2)
        return time.monotonic()

    def _run(self) -> None:
        session: StSession | None = None
        while not self.stop_event.is_set():
            t0, seconds = time.monotonic(), 0.0
            try:
                if session is None:
                    session = self.h.session(VICTIM_QUERY, source=VICTIM_SOURCE)
                    session.open()
                    own_run(session)
                drain(session)
                if lp.finished(session):
                    session.click(KEY_RESET)
                before = rounds(session)
                t0 = time.monotonic()
                session.click(KEY_STEP)
                seconds = time.monotonic() - t0
                ok = rounds(session) == before + 1 or lp.finished(session)
                self.token = run_token(session) or self.token
                self.samples.append(StepSample(t0, seconds, ok, None if ok else f"rounds {before} -> {rounds(session)}: {first_message(session)}"))
            except Exception as exc:  # a dropped connection or a timeout is a failed Step; open afresh
                seconds = time.monotonic() - t0
                self.samples.append(StepSample(t0, seconds, False, f"{type(exc).__name__}: {str(exc)[:120]}"))
                with contextlib.suppress(Exception):
                    session.close()
                session = None
            self.stop_event.wait(max(0.05, self.every_s - seconds))
        if session is not None:
            session.close()


class Sampler:
    """Every replica's RSS and thread count, twice a second (the pids in the room's status file)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        import psutil

        procs: dict[int, psutil.Process] = {}
        while not self.stop_event.is_set():
            for r in (self.h.handle.status() or {}).get("replicas", []):
                pid = r.get("pid")
                if pid is None:
                    continue
                try:
                    p = procs.setdefault(pid, psutil.Process(pid))
                    with p.oneshot():
                        self.h.samples.append(ProcSample(time.monotonic(), r["id"], pid, p.memory_info().rss / 2**20, p.num_threads()))
                except psutil.Error:
                    procs.pop(pid, None)
            self.stop_event.wait(SAMPLE_EVERY_S)


class Presenting:
    """A presenter on r2 (Steps once, presents with the key) and `followers` followers pinned in turn to each replica,
    each drawing what the server pushes (specviz.loadtest.presenter.follow). step() makes presenter Steps and remembers
    when; redraws() says how long each follower took to show each of them."""

    def __init__(self, h: Harness, followers: int, max_new_tokens: int = 256) -> None:
        self.h = h
        self.teacher = h.session(PRESENTER.query(max_new_tokens), replica=REPLICA_B)
        self.followers = [Follower(i) for i in range(followers)]
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.clicks: dict[int, float] = {}
        self.presentation = None

    def __enter__(self) -> Presenting:
        self.teacher.open()
        own_run(self.teacher)
        self.teacher.click(KEY_STEP)
        self.presentation = present(self.h, self.teacher)
        if self.presentation is None:
            raise RuntimeError(f"the presenter could not present: {messages(self.teacher, sidebar_only=True)[:2]}")
        pins = self.h.replica_ids() or [REPLICA_A]
        joined = threading.Barrier(len(self.followers) + 1)
        for f in self.followers:
            t = threading.Thread(target=follow, args=(self.h.url, f, joined, self.stop_event, pins[f.index % len(pins)]), daemon=True)
            t.start()
            self.threads.append(t)
        with contextlib.suppress(threading.BrokenBarrierError):
            joined.wait(timeout=300)
        return self

    def step(self, n: int, think_s: float, until: Callable[[], bool] | None = None) -> dict[int, float]:
        """n presenter Steps, think_s apart (stopping early when until() says so); returns round -> click time."""
        made = {}
        for _ in range(n):
            if until is not None and until():
                break
            time.sleep(think_s)
            target = rounds(self.teacher) + 1
            clicked = time.perf_counter()
            self.teacher.click(KEY_STEP)
            if rounds(self.teacher) == target:
                made[target] = clicked
        self.clicks.update(made)
        return made

    def redraws(self, clicks: dict[int, float], replica: str | None = None) -> dict:
        time.sleep(max(2.0, FOLLOWER_P95_S * 2))  # the last Step's redraws arrive
        followers = [f for f in self.followers if replica is None or f.replica == replica]
        return redraw_stats(*redraw_latencies(followers, clicks))

    def pushes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.followers:
            out[f.replica] = out.get(f.replica, 0) + f.pushes
        return out

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)
        with contextlib.suppress(Exception):
            if self.teacher.has_widget(KEY_STOP_PRESENT):
                self.teacher.click(KEY_STOP_PRESENT)
        self.teacher.close()
        store = self.h.presentations()
        live = store.read()
        if live is not None:  # nobody could stop it: end it as the owner would (by hand), so the next attack starts clean
            store.stop(live.id)


def present(h: Harness, session: StSession):
    """Type the key and press *Present this run* (one rerun, as a browser sends both); the presentation it made, or
    None (read from the run directory, not from the page's words)."""
    before = h.presentations().read()
    typed = session.stage(KEY_PRESENT_KEY, h.key)
    session.click(KEY_PRESENT)
    session.values.pop(typed.proto.text_input.id, None)  # typed once, as a browser's password box is emptied
    after = h.presentations().read()
    return after if after is not None and (before is None or after.id != before.id or after.run != before.run) else None


def warm_replicas(h: Harness) -> None:
    """One Step on every replica before anything is measured: each loads the model and starts its worker threads, so
    a replica's first presenter or attacker does not read as memory and threads the attack took."""
    for rid in h.replica_ids():
        s = h.session(VICTIM_QUERY, replica=rid)
        try:
            s.open()
            s.click(KEY_STEP)
        finally:
            s.close()
