"""The fair-share attacks (no address may take another's share): one address's sessions filling the KV budget while another
address asks for a run, and races started back to back while the victim steps."""

from __future__ import annotations

import contextlib
import time

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import KEY_RACE_START, KEY_STEP, RACE_PAGE
from specviz.loadtest.attacks.harness import ATTACKER_SOURCE, NEWCOMER_SOURCE, Config, Harness, first_message, own_run, rounds
from specviz.loadtest.protocol import StSession
from specviz.workshop.budgets import IDLE_S

# A hog's run: a short prompt at 256 new tokens, about 400 KV tokens with the session's plain baseline (three held
# 1,196 in a --quick run); the kv-hog room's budget (catalogue.KV_HOG_BUDGET) holds a few of them beside the victim's
# runs, so one address fills it, while a newcomer's run stays within a third of it (its fair share).
HOG_QUERY = {"prompt": "Write a Python function that reverses a string.", "drafter": "ngram", "seed": "7", "max_new_tokens": "256"}


def _step_once(h: Harness, cfg: Config, source: str) -> tuple[StSession, dict]:
    """A fresh session from `source` on the step-through page, one Step: (the session, what it got)."""
    s = h.session(HOG_QUERY, timeout_s=cfg.attack_s, source=source)
    s.open()
    own_run(s)
    t0 = time.monotonic()
    s.click(KEY_STEP)
    return s, {"ran": rounds(s) >= 1, "message": first_message(s), "exceptions": s.exceptions()[:2], "seconds": round(time.monotonic() - t0, 1)}


def attack_kv_hog(h: Harness, cfg: Config) -> dict:
    """The attacker's address opens sessions that each Step one run until the KV budget refuses one (at most
    cfg.hog_sessions), waits until its runs are idle, then another address asks for the same run (does it run, and
    was a hog's run freed for it?), the attacker asks once more (refused: over its fair share while others wait?),
    and every hog session Steps again (the freed run restores from its saved file)."""
    hogs: list[StSession] = []
    out: dict = {"budget": int(h.env.get("SPECVIZ_MAX_KV_TOKENS", "0") or 0), "hog_refused": None}
    try:
        for _ in range(cfg.hog_sessions):
            s, got = _step_once(h, cfg, source=ATTACKER_SOURCE)
            if not got["ran"]:
                out["hog_refused"] = got["message"]
                s.close()
                break
            hogs.append(s)
        out["hog_sessions"] = len(hogs)
        time.sleep(IDLE_S + 1.0)  # the hog's runs are idle now: the budget may free them for another client
        newcomer, out["newcomer"] = _step_once(h, cfg, source=NEWCOMER_SOURCE)
        extra, out["extra"] = _step_once(h, cfg, source=ATTACKER_SOURCE)
        for s in (newcomer, extra):
            s.close()
        advanced, said = 0, []
        for s in hogs:
            before = rounds(s)
            s.click(KEY_STEP)
            if rounds(s) == before + 1 or lp.finished(s):
                advanced += 1
            elif first_message(s):
                said.append(first_message(s))
        out["hogs_stepped_again"], out["hog_said_after"] = advanced, said[:2]
        out["exceptions"] = sum(len(s.exceptions()) for s in hogs) + len(out["newcomer"]["exceptions"]) + len(out["extra"]["exceptions"])
    finally:
        for s in hogs:
            with contextlib.suppress(Exception):
                s.close()
    return out


def attack_race(h: Harness, cfg: Config) -> dict:
    """cfg.races races on the race page, back to back (each starts as the last one ends), at cfg.race_new_tokens
    new tokens, while the victim steps on the same replica: the seconds of each and what the page said."""
    s = h.session({**HOG_QUERY, "max_new_tokens": str(cfg.race_new_tokens)}, page=RACE_PAGE, timeout_s=cfg.attack_s * 4)
    s.open()
    seconds, said = [], []
    try:
        for _ in range(cfg.races):
            t0 = time.monotonic()
            s.click(KEY_RACE_START)
            seconds.append(round(time.monotonic() - t0, 1))
            message = first_message(s)
            if message:
                said.append(message)
        return {"races": len(seconds), "new_tokens": cfg.race_new_tokens, "race_s": seconds, "said": said[:2], "exceptions": len(s.exceptions())}
    finally:
        s.close()
