"""The run attacks (no participant's runs may crowd out another's): reruns flooding a small run directory and Steps of a finished fork, the
presenter's reload, adaptive k under the owner's cap, and a long Benchmark sweep beside a presentation."""

from __future__ import annotations

import threading
import time

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import (
    BENCH_PAGE,
    KEY_ADAPTIVE_K,
    KEY_BENCH_RUN,
    KEY_FORK,
    KEY_RUN_ALL,
    KEY_STEP,
    KEY_STOP_PRESENT,
)
from specviz.loadtest.attacks.harness import (
    REPLICA_A,
    REPLICA_B,
    VICTIM_QUERY,
    Config,
    Harness,
    Presenting,
    first_message,
    messages,
    own_run,
    present,
    rounds,
    run_token,
    sidebar_alerts,
)
from specviz.loadtest.presenter import PRESENTER

COPY_PROMPT = "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."


def _make_run(h: Harness) -> str | None:
    """A run of one round by a fresh session on r1; its token."""
    s = h.session(VICTIM_QUERY)
    s.open()
    own_run(s)
    s.click(KEY_STEP)
    token = run_token(s)
    s.close()
    return token


def _restores(h: Harness, token: str | None) -> bool:
    """A reload with ?run=token gets the run back (its rounds drawn)."""
    if token is None:
        return False
    s = h.session(f"run={token}")
    try:
        s.open()
        return rounds(s) > 0
    finally:
        s.close()


def attack_run_flood(h: Harness, cfg: Config) -> dict:
    out: dict = {}
    with Presenting(h, followers=0, max_new_tokens=24) as p:
        presented = p.presentation.run
        victim_token = h.victim.token if h.victim else None
        a, b = _make_run(h), _make_run(h)
        victim_tokens = {t for t in (victim_token,) if t}
        initial = {f.name for f in h.run_dir.glob("*.json")}
        seen, gone, stop = set(initial), set(), threading.Event()

        def watch() -> None:  # every name written, and every name that went (files are replaced atomically: a name never blinks)
            last = set(initial)
            while not stop.is_set():
                now = {f.name for f in h.run_dir.glob("*.json")}
                seen.update(now)
                gone.update(last - now)
                last = now
                if h.victim is not None and h.victim.token:
                    victim_tokens.add(h.victim.token)
                stop.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        flood = h.session(f"run={a}")
        flood.open()
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < cfg.flood_s:
            flood.query = f"run={b if n % 2 == 0 else a}"
            flood.rerun()
            n += 1
        out["flood_s"], out["reruns"] = round(time.monotonic() - t0, 1), n
        flood.close()
        stop.set()
        watcher.join()
        out["files_written"] = len(seen - initial)
        out["files_evicted"] = len(gone)
        out["victim_run_kept"] = None if not victim_tokens else not any(f"{t}.json" in gone for t in victim_tokens)
        out["presented_run_kept"] = f"{presented}.json" not in gone and (h.run_dir / f"{presented}.json").exists()
        out["victim_run_restores"] = _restores(h, h.victim.token) if h.victim is not None and h.victim.token else None
        out.update(_spam_finished_fork(h, cfg, p.presentation.id))
    return out


def _spam_finished_fork(h: Harness, cfg: Config, presentation_id: str) -> dict:
    """Fork the presentation, run the fork to its end, then Step it spam_per_s times a second: board bytes added."""
    board = h.run_dir / h.presentations().board_name(presentation_id)  # the load tests run on a run directory
    s = h.session()
    s.open()
    s.click(KEY_FORK)
    s.click(KEY_RUN_ALL)
    finished = lp.finished(s)
    size0 = board.stat().st_size if board.exists() else 0
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < cfg.spam_s:
        s.click(KEY_STEP)
        n += 1
        time.sleep(max(0.0, t0 + n / cfg.spam_per_s - time.monotonic()))
    elapsed = time.monotonic() - t0
    s.close()
    size1 = board.stat().st_size if board.exists() else 0
    return {"spam_steps": n, "spam_per_s": round(n / elapsed, 1), "board_bytes_added": size1 - size0, "fork_finished": finished}


def attack_presenter_reload(h: Harness, cfg: Config) -> dict:
    store = h.presentations()
    teacher = h.session(PRESENTER.query(128), replica=REPLICA_B)
    teacher.open()
    own_run(teacher)
    teacher.click(KEY_STEP)
    teacher.click(KEY_STEP)
    p0 = present(h, teacher)
    if p0 is None:
        raise RuntimeError(f"the presenter could not present: {messages(teacher, sidebar_only=True)[:2]}")
    fork = h.session()  # a participant forks and Steps: the board has points
    fork.open()
    fork.click(KEY_FORK)
    fork.click(KEY_STEP)
    fork.click(KEY_STEP)
    fork.close()
    points0 = len(store.points(p0.id))
    # the reload: a fresh session, the same cookies and URL, no widget values
    teacher.close()
    teacher.values.clear()
    teacher.open()
    out = {"board_points_before": points0, "round_before": p0.round, "stop_button_after_reload": teacher.has_widget(KEY_STOP_PRESENT)}
    if out["stop_button_after_reload"]:
        teacher.click(KEY_STOP_PRESENT)
        out.update(reclaimed=False, stopped=store.read() is None)
    else:
        own_run(teacher)
        p1 = present(h, teacher)
        out["reclaimed"] = p1 is not None
        out["reclaim_said"] = sidebar_alerts(teacher)[:2]
        if p1 is not None:
            out.update(same_presentation=p1.id == p0.id, round_kept=p1.round == p0.round, board_kept=len(store.points(p1.id)) >= points0)
        out["stopped"] = False
        if teacher.has_widget(KEY_STOP_PRESENT):
            teacher.click(KEY_STOP_PRESENT)
            out["stopped"] = store.read() is None
    teacher.close()
    live = store.read()
    out["orphaned"] = live is not None
    if live is not None:
        store.stop(live.id)  # the owner ends it by hand, so the next attack starts clean
    return out


def attack_adaptive_k(h: Harness, cfg: Config) -> dict:
    from specviz.workshop.saved_runs import RunStore

    cap = int(h.env["SPECVIZ_MAX_DRAFT_TOKENS"])
    s = h.session({"prompt": COPY_PROMPT, "drafter": "lookup", "num_draft_tokens": str(cap), "max_new_tokens": "128", "temperature": "0"})
    s.open()
    own_run(s)
    s.set_widget(KEY_ADAPTIVE_K, True)
    for _ in range(cfg.k_rounds):
        s.click(KEY_STEP)
        if lp.finished(s):
            break
    token = run_token(s)
    s.close()
    records = RunStore(h.run_dir).load(token).recording.runs[0].records
    return {"cap": cap, "k_per_round": [r.num_draft_tokens for r in records], "drafted_per_round": [len(r.drafted) for r in records], "tokens_per_round": [len(r.emitted) for r in records]}


def attack_long_job(h: Harness, cfg: Config) -> dict:
    out: dict = {}
    with Presenting(h, cfg.followers) as p:
        s = h.session(page=BENCH_PAGE, timeout_s=cfg.attack_s * 4)
        s.open()
        for key, value in cfg.sweep.items():
            slider = s.widget(key).proto.slider
            s.set_widget(key, min(float(value), max(slider.max, slider.min)))
        out["button_disabled"] = s.widget(KEY_BENCH_RUN, ("button",)).proto.button.disabled  # over the owner's max runs
        done = threading.Event()
        job: dict = {}

        def run_job() -> None:
            t0 = time.monotonic()
            try:
                s.click(KEY_BENCH_RUN)
                job.update(message=first_message(s), exceptions=len(s.exceptions()))
            except Exception as exc:
                job["message"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            job["seconds"] = round(time.monotonic() - t0, 1)
            done.set()

        worker = threading.Thread(target=run_job, daemon=True)
        worker.start()
        clicks = p.step(10_000, cfg.think_s, until=done.is_set)
        worker.join()
        s.close()
        out["job_s"], out["job_said"], out["presenter_steps"] = job.get("seconds"), job.get("message"), len(clicks)
        out["redraw_by_replica"] = {rid: p.redraws(clicks, rid) for rid in sorted({f.replica for f in p.followers})}
        out["followers"] = out["redraw_by_replica"].get(REPLICA_A) or p.redraws(clicks)
    return out
