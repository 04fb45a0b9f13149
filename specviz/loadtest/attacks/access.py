"""The access attacks, on what only the owner and the presenter may do: cleared caches beside a presentation, guessed
presenter keys and a room locked by many addresses while the teacher presents, and owner powers reached through a
proxy header, a server bound to every address, a page at a DNS-rebinding name or another site's page, or a proxy that
adds no header."""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specviz.loadtest import REPO
from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import KEY_PRESENT, KEY_PRESENT_KEY, KEY_RESET, KEY_STEP, OWNER_WIDGETS
from specviz.loadtest.attacks.goals import classify_key_reply
from specviz.loadtest.attacks.harness import (
    REPLICA_A,
    SAMPLE_EVERY_S,
    VICTIM_QUERY,
    VICTIM_TIMEOUT_S,
    Config,
    Harness,
    Presenting,
    own_run,
    present,
    sidebar_alerts,
)
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import room
from specviz.loadtest.server import healthy, stop_server
from specviz.workshop import presenter_key as pk
from specviz.workshop.processes import free_port

MODEL_LOAD = re.compile(r"Loading weights")  # transformers' progress bar in a replica's log: one line per model load
LOG_RELAY_S = 2.0  # the room copies its replicas' output to its log every half second or so
FORWARDED = {"X-Forwarded-For": "203.0.113.7"}  # a documentation address: a client somewhere else, as a proxy says
LOCKERS = "127.0.1.{}"  # the addresses that lock the room (each one wrong key), through the balancer's X-Forwarded-For
TEACHER_SOURCE = "127.0.0.77"  # the teacher's address: no wrong key from it


def _try_key(s: StSession, key: str) -> str:
    s.stage(KEY_PRESENT_KEY, key)
    s.click(KEY_PRESENT)
    return classify_key_reply(sidebar_alerts(s))


def _key_again(s: StSession) -> str:
    """Wrong keys until one is answered as checked or refused unseen (the first try after a clear can find the box
    empty: the clear dropped the session's widget values)."""
    verdict_ = "other"
    for n in range(3):
        verdict_ = _try_key(s, f"{9000 + n}")
        if verdict_ != "other":
            break
    return verdict_


def attack_clear_cache(h: Harness, cfg: Config) -> dict:
    out: dict = {"clears": cfg.clears}
    with Presenting(h, cfg.followers) as p:
        on_a = sum(1 for f in p.followers if f.replica == REPLICA_A) or 1
        pushes0 = p.pushes()
        before = p.step(cfg.presenter_steps, cfg.think_s)
        pushes1 = p.pushes()
        out["pushes_per_step_before"] = round((pushes1.get(REPLICA_A, 0) - pushes0.get(REPLICA_A, 0)) / (on_a * max(1, len(before))), 2)
        out["redraw_before"] = p.redraws(before)
        attacker = h.session(VICTIM_QUERY)
        attacker.open()
        own_run(attacker)
        replies = [_try_key(attacker, f"{n:04d}") for n in range(6)]  # wrong keys until the back-off holds
        out["backoff_before_clears"] = replies[-1]
        offset = lp.log_size(h.handle.log_path)
        attacker.click(KEY_RESET)  # one fresh run before the clears: what a run starts (a baseline worker) is running
        attacker.click(KEY_STEP)
        time.sleep(SAMPLE_EVERY_S * 2)
        out["resources_window"] = [time.monotonic(), None]  # the threads and memory the clears alone cost
        for _ in range(cfg.clears):
            attacker.clear_cache()
            attacker.click(KEY_RESET)  # a fresh run needs the model again: whatever the clear dropped is loaded now
            attacker.click(KEY_STEP)
        time.sleep(LOG_RELAY_S)
        out["resources_window"][1] = time.monotonic()
        out["model_loads"] = _model_loads(h, offset, REPLICA_A)
        out["backoff_after_clears"] = _key_again(attacker)
        attacker.close()
        pushes2 = p.pushes()
        after = p.step(cfg.presenter_steps, cfg.think_s)
        out["redraw_after"] = p.redraws(after)
        pushes3 = p.pushes()
        out["pushes_per_step_after"] = round((pushes3.get(REPLICA_A, 0) - pushes2.get(REPLICA_A, 0)) / (on_a * max(1, len(after))), 2)
        out["followers"] = out["redraw_after"]
    return out


def _model_loads(h: Harness, offset: int, replica: str) -> int:
    with open(h.handle.log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    lines = text.split("\n")  # not splitlines(): a progress bar's carriage returns stay inside its line
    return sum(1 for line in lines if line.startswith(f"[{replica}]") and MODEL_LOAD.search(line))


@dataclass
class Guesses:
    checked: int = 0
    limited: int = 0
    other: int = 0
    presenting: int = 0
    errors: int = 0
    sessions: int = 0
    said: dict = field(default_factory=dict)  # verdict -> one thing the page said


def _guess(h: Harness, g: Guesses, stop_at: float, seed: int) -> None:
    """Wrong 4-digit keys until stop_at; a fresh session whenever one is refused unseen (as an attacker would)."""
    rng, s = random.Random(seed), None
    while time.monotonic() < stop_at:
        try:
            if s is None:
                s = h.session(replica=None)
                s.open()
                g.sessions += 1
            verdict_ = _try_key(s, f"{rng.randrange(10_000):04d}")
            setattr(g, verdict_, getattr(g, verdict_) + 1)
            g.said.setdefault(verdict_, (sidebar_alerts(s) or [""])[0][:120])
            if verdict_ in ("limited", "other"):
                s.close()
                s = None
        except Exception as exc:
            g.errors += 1
            g.said.setdefault("error", f"{type(exc).__name__}: {str(exc)[:100]}")
            with contextlib.suppress(Exception):
                s.close()
            s = None
    if s is not None:
        s.close()


def attack_key_guess(h: Harness, cfg: Config) -> dict:
    by_threads = {}
    for n in cfg.guess_threads:
        guesses = [Guesses() for _ in range(n)]
        t0 = time.monotonic()
        threads = [threading.Thread(target=_guess, args=(h, g, t0 + cfg.guess_s, 1000 * n + i), daemon=True) for i, g in enumerate(guesses)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=cfg.guess_s + VICTIM_TIMEOUT_S)
        minutes = (time.monotonic() - t0) / 60
        total = {k: sum(getattr(g, k) for g in guesses) for k in ("checked", "limited", "other", "presenting", "errors", "sessions")}
        said = {}
        for g in guesses:
            for k, v in g.said.items():
                said.setdefault(k, v)
        by_threads[n] = {**total, "checked_per_min": round(total["checked"] / minutes, 1), "said": said}
    return {"by_threads": by_threads, "presentation_after": h.presentations().read() is not None, **_teacher_in_a_locked_room(h)}


def _teacher_in_a_locked_room(h: Harness) -> dict:
    """ROOM_MAX_WRONG addresses send one wrong key each (the room is locked), one of them tries again (checked, then
    locked), then the teacher, from an address with no wrong key, Steps and presents with the right key."""
    said = []
    for i in range(pk.ROOM_MAX_WRONG + 1):
        s = h.session(replica=None, source=LOCKERS.format(10 + min(i, pk.ROOM_MAX_WRONG - 1)))
        try:
            s.open()
            said.append(_try_key(s, f"a wrong key {i}"))
        finally:
            s.close()
    teacher = h.session(VICTIM_QUERY, replica=None, source=TEACHER_SOURCE)
    try:
        teacher.open()
        own_run(teacher)
        teacher.click(KEY_STEP)
        made = present(h, teacher)
    finally:
        teacher.close()
    if made is not None:
        h.presentations().stop(made.id)
    return {"lockers_checked": said.count("checked"), "lockers_limited": said.count("limited"), "teacher_presented": made is not None}


def machine_address() -> str | None:
    """This machine's first non-loopback IPv4 address (a participant elsewhere reaches the server there), or None."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith(("127.", "169.254.")):
                return a.address
    return None


def _probe(setup: str, url: str, participant: bool, headers: dict | None = None) -> dict:
    """Open the step-through page as `setup` says; which owner-only widgets the sidebar drew."""
    s = StSession(url, timeout_s=VICTIM_TIMEOUT_S, headers=headers)
    try:
        s.open()
        shown = [k for k in OWNER_WIDGETS if s.has_widget(k)]
        return {"setup": setup, "participant": participant, "owner_widgets": shown}
    except Exception as exc:
        return {"setup": setup, "participant": participant, "owner_widgets": [], "error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    finally:
        s.close()


@contextlib.contextmanager
def streamlit_server(address: str, workdir: Path) -> Iterator[int]:
    """`streamlit run app.py --server.address <address>` on a free port (the owner's shell: no SPECVIZ_MODE); yields
    the port; always stopped."""

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_MODE"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", SPECVIZ_RUN_DIR=str(workdir / "runs"), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.address", address, "--server.headless", "true", "--server.fileWatcherType", "none"]
    with open(workdir / "streamlit.log", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not healthy(f"http://127.0.0.1:{port}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start: {(workdir / 'streamlit.log').read_text(errors='replace')[-800:]}")
            time.sleep(0.25)
        yield port
    finally:
        stop_server(proc, timeout_s=30)


def attack_owner(h: Harness, cfg: Config) -> dict:
    address = machine_address()
    setups = [_probe("the room's balancer, with X-Forwarded-For", h.url, True, FORWARDED)]
    with tempfile.TemporaryDirectory(prefix="specviz-attack-owner-") as tmp:
        for sub in ("room", "all"):
            (Path(tmp) / sub).mkdir()
        local_env = {"SPECVIZ_MODE": "local", "SPECVIZ_PRESENTER_KEY": h.key}
        with room(1, Path(tmp) / "room", local_env, ["--bind", "0.0.0.0"]) as local_room:
            port = urllib.parse.urlparse(local_room.url).port
            if address:
                setups.append(_probe(f"a room started with SPECVIZ_MODE=local, at {address}", f"http://{address}:{port}", True))
            setups.append(_probe("a room started with SPECVIZ_MODE=local, loopback with X-Forwarded-For", local_room.url, True, FORWARDED))
        with streamlit_server("", Path(tmp) / "all") as port:
            if address:
                setups.append(_probe(f'--server.address "" at {address}', f"http://{address}:{port}", True))
            setups.append(_probe('--server.address "" on loopback with X-Forwarded-For (a tunnel or proxy)', f"http://127.0.0.1:{port}", True, FORWARDED))
            loopback = f"http://127.0.0.1:{port}"
            setups.append(_probe("a page at a DNS-rebinding name (Host and Origin evil.example, on loopback)", loopback, True, {"Host": f"evil.example:{port}"}))
            setups.append(_probe("another site's page (Host localhost, Origin evil.example)", loopback, True, {"Host": f"localhost:{port}", "Origin": "http://evil.example"}))
            public = {"Host": "specviz.example.org", "Origin": "https://specviz.example.org"}
            setups.append(_probe("a visitor through a proxy that adds no header (loopback, the public Host and Origin)", loopback, True, public))
            setups.append(_probe('--server.address "" on loopback, no proxy header (the owner: control)', f"http://127.0.0.1:{port}", False))
    return {"machine_address": address, "setups": setups}
