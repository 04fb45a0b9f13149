"""The input attacks (no input a participant sends may stall the room or show a traceback): a prompt of many tokens on
the Exactness lab and on the step-through page, sessions stepping at the owner's token budget and one more, and
malformed values for the lab's toy table from a raw client."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import (
    KEY_COMPARE,
    KEY_LAB_MODE,
    KEY_LAB_PROMPT,
    KEY_LAB_RUN,
    KEY_MAX_NEW,
    KEY_PROMPT,
    KEY_STEP,
    KEY_TOY_TABLE,
    LAB_PAGE,
    OPTION_EARLY_EXIT,
    OPTION_FAST,
    TOY_METRIC,
)
from specviz.loadtest.attacks.goals import shows_internals
from specviz.loadtest.attacks.harness import VICTIM_TIMEOUT_S, Config, Harness, first_message, own_run, rounds
from specviz.loadtest.protocol import StSession

log = logging.getLogger("room_attacks")

FLOOD_CHAR = "\U00010380"  # 𐎀: 4 tokens in the embedded tokenizer (a long prompt that is short in characters)
TOKENS_PER_FLOOD_CHAR = 4
TEMPLATE_TOKENS = 48  # the chat template's tokens around a prompt: a prompt "at the budget" leaves them room
MALFORMED_TABLE = ('{"edited_rows": {"99": {"p_target": 1}}}', "{not json", '{"deleted_rows": ["x"], "edited_rows": []}')
VALID_TABLE = '{"edited_rows": {}, "added_rows": [], "deleted_rows": []}'


def attack_token_lab(h: Harness, cfg: Config) -> dict:
    s = h.session(page=LAB_PAGE, timeout_s=cfg.attack_s)
    s.open()
    s.set_widget(KEY_LAB_MODE, _option(s, KEY_LAB_MODE, OPTION_FAST))
    s.set_widget(KEY_LAB_PROMPT, FLOOD_CHAR * cfg.lab_chars)
    return _one_long_click(s, KEY_LAB_RUN, cfg.lab_chars)


def attack_token_step(h: Harness, cfg: Config) -> dict:
    s = h.session({"drafter": "ngram", "max_new_tokens": "16"}, timeout_s=cfg.attack_s)
    s.open()
    own_run(s)
    s.set_widget(KEY_PROMPT, FLOOD_CHAR * cfg.step_chars)
    s.set_widget(KEY_COMPARE, _option(s, KEY_COMPARE, OPTION_EARLY_EXIT))
    out = _one_long_click(s, KEY_STEP, cfg.step_chars)
    out["rounds"] = rounds(s) if out["finished"] else None
    return out


def _one_long_click(s: StSession, key: str, chars: int) -> dict:
    """Click and wait (at most the session's timeout): how long the attacker's page took and what it said."""
    t0, finished = time.monotonic(), True
    try:
        s.click(key)
    except Exception as exc:  # still running at the bound: the attacker leaves (the server's turn may go on)
        finished = False
        log.info("attacker gave up after %.0f s: %s", time.monotonic() - t0, exc)
    out = {"chars": chars, "tokens": chars * TOKENS_PER_FLOOD_CHAR, "attacker_s": round(time.monotonic() - t0, 1), "finished": finished,
           "message": first_message(s) if finished else None, "exceptions": len(s.exceptions()) if finished else None}  # fmt: skip
    s.close()
    return out


def _option(s: StSession, key: str, word: str) -> str:
    """The option of a menu whose label contains `word` (labels change more often than what they name)."""
    options = s.options(key)
    match = next((o for o in options if word.lower() in o.lower()), None)
    if match is None:
        raise RuntimeError(f"no option with {word!r} in {key!r}: {options}")
    return match


def attack_memory(h: Harness, cfg: Config) -> dict:
    chars = max(1, (cfg.max_prompt_tokens - TEMPLATE_TOKENS) // TOKENS_PER_FLOOD_CHAR)
    release, t0 = threading.Event(), time.monotonic()
    hogs = [dict(rounds=0, failures=0, errors=[]) for _ in range(cfg.memory_sessions)]
    ready = threading.Barrier(cfg.memory_sessions + 1)
    threads = [threading.Thread(target=_hog, args=(h, cfg, chars, hog, t0 + cfg.memory_s, ready, release), daemon=True) for hog in hogs]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait(timeout=cfg.memory_s + cfg.attack_s)  # every hog has stepped to the deadline and holds its run
    eleventh = {"ran": False, "message": None, "exceptions": [], "seconds": None}
    try:
        s = _hog_session(h, cfg, chars)
        t1 = time.monotonic()
        s.click(KEY_STEP)
        eleventh.update(ran=rounds(s) >= 1, message=first_message(s), exceptions=s.exceptions()[:2], seconds=round(time.monotonic() - t1, 1))
        s.close()
    except Exception as exc:
        eleventh["message"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    release.set()
    for t in threads:
        t.join(timeout=60)
    return {
        "sessions": cfg.memory_sessions, "prompt_tokens": chars * TOKENS_PER_FLOOD_CHAR, "rounds": sum(x["rounds"] for x in hogs),
        "failures": sum(x["failures"] for x in hogs), "errors": [e for x in hogs for e in x["errors"]][:3], "seconds": round(time.monotonic() - t0, 1), "eleventh": eleventh,
    }  # fmt: skip


def _hog_session(h: Harness, cfg: Config, chars: int) -> StSession:
    """A participant at the budget: the prompt at the token budget, max new tokens at the cap, compare with early exit."""
    s = h.session({"drafter": "ngram"}, timeout_s=cfg.attack_s)
    s.open()
    own_run(s)
    s.set_widget(KEY_MAX_NEW, s.widget(KEY_MAX_NEW).proto.number_input.max)
    s.set_widget(KEY_COMPARE, _option(s, KEY_COMPARE, OPTION_EARLY_EXIT))
    s.set_widget(KEY_PROMPT, FLOOD_CHAR * chars)
    return s


def _hog(h: Harness, cfg: Config, chars: int, hog: dict, deadline: float, ready: threading.Barrier, release: threading.Event) -> None:
    s = None
    try:
        s = _hog_session(h, cfg, chars)
        while time.monotonic() < deadline and not lp.finished(s):
            before = rounds(s)
            s.click(KEY_STEP)
            if rounds(s) == before + 1:
                hog["rounds"] += 1
            else:
                hog["failures"] += 1
                hog["errors"].append(first_message(s))
    except Exception as exc:
        hog["failures"] += 1
        hog["errors"].append(f"{type(exc).__name__}: {str(exc)[:120]}")
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait(timeout=cfg.attack_s)
    release.wait(timeout=cfg.attack_s + VICTIM_TIMEOUT_S)
    if s is not None:
        s.close()


def attack_malformed(h: Harness, cfg: Config) -> dict:
    cases = []
    for bad in MALFORMED_TABLE:
        s = h.session(page=LAB_PAGE)
        s.open()
        table = s.widget(KEY_TOY_TABLE, ("dataframe",))
        table_id = table.proto.dataframe.id
        s.send_state(table_id, table.fragment_id, string_value=bad)
        drawn = s.exceptions() + [line for tb in s.tracebacks() for line in tb] + s.texts()
        case = {"value": bad[:40], "exceptions": len(s.exceptions()), "frames": sum(len(tb) for tb in s.tracebacks()), "internals": shows_internals(drawn), "said": first_message(s)}
        try:  # what a browser sends next: the table as it is (its id is still the table's, drawn or not)
            s.send_state(table_id, table.fragment_id, string_value=VALID_TABLE)
            case["recovered"] = not s.exceptions() and s.metric(TOY_METRIC) is not None
        except Exception as exc:
            case.update(recovered=False, recovery_error=f"{type(exc).__name__}: {str(exc)[:100]}")
        s.close()
        cases.append(case)
    return {"cases": cases}
