"""Issue 32's attacks, one at a time, against `python -m specviz room --replicas 2`, with a victim stepping beside them:
what each attack does to another participant, to the replicas' memory and threads, and to the presenter's followers.

    python scripts/room_attacks.py --json attacks.json          # every attack (about 30 minutes on a quiet 2-core machine)
    python scripts/room_attacks.py --attacks clear-cache,key-guess
    python scripts/room_attacks.py --quick                      # each attack tiny: checks the script, measures nothing

The room starts in shared mode (the room's own default) with a random presenter key in its environment, a fresh
SPECVIZ_RUN_DIR, SPECVIZ_MAX_PROMPT_TOKENS from --max-prompt-tokens and any further owner setting from --owner-env
NAME=VALUE (a KV-token budget, key limits: whatever the owner would set). A *victim* (the protocol client,
specviz.loadtest.protocol) opens the step-through page on replica r1 (the balancer's sticky cookie) and presses Step
about every --victim-every-s seconds for the whole run, Reset when its run ends. A sampler reads every replica's RSS
and thread count (psutil, the pids in the room's status file) twice a second. Attacks that need an owner setting of
their own (a 1 MB run directory, k capped at 2, a room started with SPECVIZ_MODE=local) get a room of their own.

The attacks (--attacks, all by default; the issue's item in brackets). Attackers go to r1, the victim's replica,
as a hostile participant would (the sticky cookie is theirs to set); the presenter presents from r2.
  token-lab         [1] the Exactness lab's fast mode with 3,000 x U+10380 (12,000 tokens)
  token-step        [1] the step-through page with 2,000 x U+10380 and Compare side by side set to early exit
  clear-cache       [2] --clears `clear_cache` messages from a raw client (each followed by a rerun, which loads what
                        was cleared), with a presenter and --followers followers: model loads in r1's log, pushes per
                        presenter Step before and after, and whether the sender's presenter-key back-off survives
  key-guess         [3] wrong presenter keys from 1 and from 4 client threads, --guess-s each, a fresh session
                        whenever one is refused (as an attacker would): keys checked per minute, refusals, errors
  memory            [4] --memory-sessions sessions at the token budget (prompt at --max-prompt-tokens, max new
                        tokens at the cap, compare with early exit) stepping, then one more: its message
  owner             [5] do participants get owner powers (trust remote code, downloads, pickle) through the room's
                        balancer with X-Forwarded-For, through a room started with SPECVIZ_MODE=local (bound to
                        0.0.0.0, reached at this machine's non-loopback address), and from `streamlit run app.py
                        --server.address ""` (non-loopback address; loopback with a proxy header; loopback alone is
                        the owner: the control)
  run-flood         [6] a 1 MB run directory: one session alternating ?run=A / ?run=B reruns, then Steps of a
                        finished fork at --spam-per-s a second: files written and evicted, whether the victim's and
                        the presented run survive, board bytes added
  presenter-reload  [6] the presenter reloads (a fresh session, same cookies and URL): can it stop, or present
                        again with the key, and does the board and the round survive
  adaptive-k        [6] SPECVIZ_MAX_DRAFT_TOKENS=2 and adaptive k on a copying prompt: k asked and tokens emitted
                        per round (from the saved run)
  long-job          [6] a Benchmark sweep on r1 while the presenter Steps: the followers' redraw on r1 (and on r2)
  malformed         [6] malformed values for the Exactness lab's toy table from a raw client: a traceback or server
                        paths on the page, and does the session recover

Each attack is bounded (--attack-s, and its own size flags); after it, the script waits until the victim finished a
Step it started after the attack ended (at most --settle-s): that Step counts for the attack. Per attack: the
victim's Step (click to drawn, client side) p50 / p95 / max and failures (a Step that did not advance the run, an
exception, a dropped connection), each replica's RSS before / peak / after and threads before / after, the
followers' redraw p95 where there are followers, and the attack's own outcome.

Printed: a markdown table (attack, what happens now, victim Step, RSS, threads, followers, verdict) under a line with
the CPU (lscpu), the date and the 1-minute load average before and after. The verdict checks the issue's goals
(victim p95 <= 3 s and no Step fails, every replica's RSS under --rss-budget-mb, threads at most --thread-slack more
after than before, followers' redraw p95 <= 1.5 s) and each attack's own (owner powers never reach a participant,
keys checked per minute <= --max-guesses-per-min, k within the cap, runs survive a flood, a finished run's Step adds
nothing to the board, no traceback, the presenter can end or reclaim a presentation after a reload, ...). --json FILE
writes the raw numbers. Exits 1 when a goal is missed (2 when the room cannot start).

Nothing here depends on the app's exact messages where an outcome can be read instead (a rounds metric, the run
directory, the presentation file); the widget keys, labels and the few message patterns it does use are in one
place below.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specviz.loadtest import REPO
from specviz.loadtest import harness as lp
from specviz.loadtest.presenter import PRESENTER, Follower, follow, redraw_latencies
from specviz.loadtest.protocol import SIDEBAR, StSession
from specviz.loadtest.room import RoomHandle, pin_replica, room
from specviz.loadtest.server import healthy, stop_server
from specviz.workshop.room import free_port

log = logging.getLogger("room_attacks")

# --- what the attacks know of the app: pages, widget keys, labels, message patterns (one place) -----------------
STEP_PAGE, LAB_PAGE, BENCH_PAGE = "", "exactness", "benchmark"  # URL paths (specviz/ui/common/navigation.py)
KEY_STEP, KEY_RESET, KEY_RUN_ALL = "step", "reset", "run_all"  # specviz/ui/step_through/controls.py
KEY_PROMPT, KEY_COMPARE, KEY_MAX_NEW, KEY_ADAPTIVE_K = "prompt", "compare", "max_new_tokens", "adaptive_k"  # specviz/ui/step_through/sidebar.py
KEY_FOLLOW, KEY_FORK = "follow", "fork"  # specviz/ui/room/follow.py, specviz/ui/room/fork.py
KEY_PRESENT_KEY, KEY_PRESENT, KEY_STOP_PRESENT = "present_key", "present", "stop_present"
KEY_LAB_MODE, KEY_LAB_PROMPT, KEY_LAB_RUN, KEY_TOY_TABLE = "lab_real_mode", "lab_real_prompt", "lab_real_run", "lab_vocab"  # pages/exactness.py
KEY_BENCH_RUN, KEY_BENCH_PER_CATEGORY, KEY_BENCH_REPEATS, KEY_BENCH_NEW = "bench_run", "bench_per_category", "bench_repeats", "bench_max_new_tokens"  # pages/benchmark.py
OWNER_WIDGETS = ("trust_remote_code", "allow_download", "allow_pickle")  # the sidebar's Models expander, owner only
ROUNDS_METRIC = "rounds"  # the step-through page's metric
TOY_METRIC = "TV from p_target"  # the toy table's first metric: the section drew
OPTION_EARLY_EXIT = "early"  # a word of the early-exit drafter's label in the Compare menu
OPTION_FAST = "fast"  # a word of the lab's fast method's label
KEY_CHECKED = ("not the presenter key",)  # a refused key that was compared
KEY_LIMITED = ("too many", "wait ", "try again", "locked", "slow down")  # a key refused without being compared
TRACEBACK = re.compile(r"Traceback|File \"|site-packages|(?:/[\w.-]+){2,}\.py")  # what shows server internals
MODEL_LOAD = re.compile(r"Loading weights")  # transformers' progress bar in a replica's log: one line per model load
LOG_RELAY_S = 2.0  # the room copies its replicas' output to its log every half second or so

# --- the attacks' material ----------------------------------------------------------------------------------------
FLOOD_CHAR = "\U00010380"  # 𐎀: 4 tokens in the embedded tokenizer (issue 32)
TOKENS_PER_FLOOD_CHAR = 4
TEMPLATE_TOKENS = 48  # the chat template's tokens around a prompt: a prompt "at the budget" leaves them room
ATTACKER_SOURCE = "127.0.0.66"  # every 127.x.y.z is this machine (Linux): two addresses, two clients
VICTIM_SOURCE = "127.0.0.10"
VICTIM_QUERY = {"prompt": "Write a Python function that reverses a string.", "drafter": "ngram", "seed": "7", "max_new_tokens": "64"}
COPY_PROMPT = "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."
FORWARDED = {"X-Forwarded-For": "203.0.113.7"}  # a documentation address: a client somewhere else, as a proxy says
MALFORMED_TABLE = ('{"edited_rows": {"99": {"p_target": 1}}}', "{not json", '{"deleted_rows": ["x"], "edited_rows": []}')
VALID_TABLE = '{"edited_rows": {}, "added_rows": [], "deleted_rows": []}'
REPLICA_A, REPLICA_B = "r1", "r2"  # the victim's and attackers' replica; the presenter's

# --- the issue's goals --------------------------------------------------------------------------------------------
VICTIM_P95_S = 3.0
FOLLOWER_P95_S = 1.5
VICTIM_TIMEOUT_S = 300.0  # a Step still unanswered after this counts as failed (the server gives up at 120 s)
SAMPLE_EVERY_S = 0.5


@dataclass(frozen=True)
class StepSample:
    """One victim Step: when it was clicked (monotonic), how long until drawn, whether the run moved on."""

    t: float
    seconds: float
    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class ProcSample:
    t: float
    replica: str
    pid: int
    rss_mb: float
    threads: int


@dataclass
class Goals:
    victim_p95_s: float = VICTIM_P95_S
    follower_p95_s: float = FOLLOWER_P95_S
    rss_budget_mb: float = 0.0  # per replica; 0: no budget checked
    thread_slack: int = 2
    max_guesses_per_min: float = 10.0


# --- the report: plain functions of what was recorded (tests/test_room_attacks.py) ----------------------------------


def victim_stats(samples: list[StepSample], t0: float, t1: float) -> dict:
    """The victim's Steps clicked in [t0, t1]: p50 / p95 / max seconds, failures and the first errors."""
    inside = [s for s in samples if t0 <= s.t <= t1]
    seconds = [s.seconds for s in inside]
    failed = [s for s in inside if not s.ok]
    return {
        "steps": len(inside), "p50": lp.rounded(lp.percentile(seconds, 0.5), 2), "p95": lp.rounded(lp.percentile(seconds, 0.95), 2),
        "max": lp.rounded(max(seconds), 2) if seconds else None, "failures": len(failed), "errors": [s.error for s in failed if s.error][:3],
    }  # fmt: skip


def resource_stats(samples: list[ProcSample], t0: float, t1: float) -> dict[str, dict]:
    """Per replica: RSS before (the last sample at or before t0, else the first after), peak within [t0, t1], after
    (the last sample at or before t1); threads before and after; the pids seen (a new pid: the replica was started
    again, e.g. after an OOM kill)."""
    out: dict[str, dict] = {}
    for rid in sorted({s.replica for s in samples}):
        mine = [s for s in samples if s.replica == rid]
        before = [s for s in mine if s.t <= t0] or [s for s in mine if s.t > t0][:1]
        window = [s for s in mine if t0 <= s.t <= t1]
        after = [s for s in mine if s.t <= t1]
        if not before or not after:
            continue
        b, a = before[-1], after[-1]
        pids = list(dict.fromkeys(s.pid for s in [b, *window, a]))
        out[rid] = {
            "rss_before_mb": round(b.rss_mb, 1), "rss_peak_mb": round(max([b.rss_mb] + [s.rss_mb for s in window]), 1), "rss_after_mb": round(a.rss_mb, 1),
            "threads_before": b.threads, "threads_after": a.threads, "pids": pids, "restarted": len(pids) > 1,
        }  # fmt: skip
    return out


def redraw_stats(latencies: list[float], missed: int) -> dict:
    return {"n": len(latencies), "p50": lp.rounded(lp.percentile(latencies, 0.5), 2), "p95": lp.rounded(lp.percentile(latencies, 0.95), 2), "missed": missed}


def classify_key_reply(texts: list[str]) -> str:
    """What the page said to a wrong key: 'checked' (it was compared and refused), 'limited' (refused unseen: a
    lock-out or rate limit), 'presenting' (it was accepted!) or 'other'."""
    low = " ".join(texts).lower()
    if any(p in low for p in KEY_CHECKED):
        return "checked"
    if any(p in low for p in KEY_LIMITED):
        return "limited"
    if "you are presenting" in low:
        return "presenting"
    return "other"


def shows_internals(texts: list[str]) -> bool:
    """A traceback, a source file or a server path in what the page drew."""
    return any(TRACEBACK.search(t) for t in texts)


# Each attack's own goals: outcome -> the goals it missed (empty: all met).
def judge_token(o: dict, goals: Goals) -> list[str]:
    return []  # the victim, memory and threads say it all


def judge_clear_cache(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("model_loads"):
        missed.append(f"{o['model_loads']} model loads after {o.get('clears')} clears")
    before, after = o.get("pushes_per_step_before"), o.get("pushes_per_step_after")
    if before is not None and after is not None and after > max(before, 1.0) + 0.25:  # one push per Step (fewer: merged)
        missed.append(f"pushes per presenter Step {before} -> {after}")
    if o.get("backoff_after_clears") == "checked":
        missed.append("the key back-off was reset by the clears")
    return missed


def judge_key_guess(o: dict, goals: Goals) -> list[str]:
    missed = []
    for threads, r in sorted(o.get("by_threads", {}).items()):
        if r["checked_per_min"] > goals.max_guesses_per_min:
            missed.append(f"{r['checked_per_min']:.0f} keys checked a minute from {threads} thread(s) (goal <= {goals.max_guesses_per_min:g})")
        if r.get("presenting"):
            missed.append("a guessed key presented")
    return missed


def judge_memory(o: dict, goals: Goals) -> list[str]:
    eleventh = o.get("eleventh") or {}
    return [f"the extra session saw an exception: {eleventh['exceptions'][0][:80]}"] if eleventh.get("exceptions") else []


def judge_owner(o: dict, goals: Goals) -> list[str]:
    leaked = [s["setup"] for s in o.get("setups", []) if s.get("participant") and s.get("owner_widgets")]
    return [f"owner options for a participant: {'; '.join(leaked)}"] if leaked else []


def judge_run_flood(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("victim_run_kept") is False:
        missed.append("the victim's run was evicted")
    if o.get("presented_run_kept") is False:
        missed.append("the presented run was evicted")
    if o.get("board_bytes_added"):
        missed.append(f"{o['board_bytes_added']:,} board bytes from Steps of a finished run")
    return missed


def judge_presenter_reload(o: dict, goals: Goals) -> list[str]:
    missed = []
    if not o.get("stopped"):
        missed.append("nobody could end the presentation after the presenter's reload")
    if o.get("reclaimed") and o.get("board_kept") is False:
        missed.append("presenting again lost the board")
    if o.get("reclaimed") and o.get("round_kept") is False:
        missed.append("presenting again moved the room to another round")
    return missed


def judge_adaptive_k(o: dict, goals: Goals) -> list[str]:
    cap, ks, emitted = o.get("cap"), o.get("k_per_round") or [], o.get("tokens_per_round") or []
    missed = []
    if cap is not None and ks and max(ks) > cap:
        missed.append(f"k reached {max(ks)} with the cap at {cap}")
    if cap is not None and emitted and max(emitted) > cap + 1:
        missed.append(f"a round emitted {max(emitted)} tokens (at most k + 1 = {cap + 1})")
    return missed


def judge_long_job(o: dict, goals: Goals) -> list[str]:
    if o.get("button_disabled"):  # the sweep asked for is over the owner's max runs: nothing ran beside the presenter
        return ["the sweep did not run (its button was disabled: over the owner's max runs)"]
    return []  # the followers' column says the rest


def judge_malformed(o: dict, goals: Goals) -> list[str]:
    cases = o.get("cases", [])
    missed = []
    shown = [c for c in cases if c.get("internals")]
    if shown:
        missed.append(f"{len(shown)} of {len(cases)} bad values showed server internals")
    stuck = [c for c in cases if not c.get("recovered")]
    if stuck:
        missed.append(f"{len(stuck)} of {len(cases)} sessions did not recover")
    return missed


def describe(name: str, o: dict) -> str:
    """One line for the table's "what happens now" from an attack's outcome (missing fields read as '?')."""
    g = _Get(o)
    if o.get("error"):
        return f"the attack did not run: {o['error'][:120]}"
    if name in ("token-lab", "token-step"):
        state = "finished" if o.get("finished") else "was still running"
        return f"{g('chars', ',')} x U+10380 (~{g('tokens', ',')} tokens): the attacker's page {state} after {g('attacker_s', '.0f')} s; it said: {o.get('message') or 'nothing'}"
    if name == "clear-cache":
        return (f"{g('clears')} clears: {g('model_loads')} model loads in r1's log; pushes per presenter Step {g('pushes_per_step_before')} -> "
                f"{g('pushes_per_step_after')}; a wrong key after the clears was {g('backoff_after_clears')}")  # fmt: skip
    if name == "key-guess":
        parts = [f"{r['checked_per_min']:.0f}/min checked from {t} thread(s) ({r['limited']} refused unseen, {r['errors']} errors, {r['sessions']} sessions)" for t, r in sorted(o.get("by_threads", {}).items())]
        return "; ".join(parts) or "?"
    if name == "memory":
        e = o.get("eleventh") or {}
        said = e.get("message") or ("ran a round" if e.get("ran") else "nothing")
        return f"{g('sessions')} sessions of ~{g('prompt_tokens', ',')} prompt tokens, compare on: {g('rounds')} rounds in {g('seconds', '.0f')} s, {g('failures')} failed; one more: {said}"
    if name == "owner":
        setups = o.get("setups", [])
        leaked = [s["setup"] for s in setups if s.get("participant") and s.get("owner_widgets")]
        control = next((s for s in setups if not s.get("participant")), None)
        owner = "" if control is None else f"; the owner at the keyboard: {'has them' if control.get('owner_widgets') else 'has none'}"
        return f"owner options for a participant in {len(leaked)} of {sum(1 for s in setups if s.get('participant'))} setups{(': ' + '; '.join(leaked)) if leaked else ''}{owner}"
    if name == "run-flood":
        kept = {True: "kept", False: "LOST", None: "?"}
        return (f"{g('reruns')} reruns wrote {g('files_written')} files in {g('flood_s', '.1f')} s, {g('files_evicted')} evicted; the victim's run "
                f"{kept[o.get('victim_run_kept')]}, the presented run {kept[o.get('presented_run_kept')]}; {g('spam_steps')} Steps of a finished run "
                f"({g('spam_per_s', '.0f')}/s) added {g('board_bytes_added', ',')} board bytes")  # fmt: skip
    if name == "presenter-reload":
        how = "its Stop button" if o.get("stop_button_after_reload") else ("the key again" if o.get("reclaimed") else "nothing")
        extra = "" if not o.get("reclaimed") else f"; board {'kept' if o.get('board_kept') else 'lost'}, round {'kept' if o.get('round_kept') else 'moved'}"
        return f"after a reload the presenter ended the presentation with {how}{extra}" if o.get("stopped") else f"after a reload nobody could end the presentation ({how} tried){extra}"
    if name == "adaptive-k":
        return f"cap {g('cap')}: k per round {o.get('k_per_round')}, tokens per round {o.get('tokens_per_round')}"
    if name == "long-job":
        per = o.get("redraw_by_replica", {})
        return f"a {g('job_s', '.0f')} s Benchmark sweep on r1: followers' redraw p95 " + ", ".join(f"{r} {v.get('p95')} s ({v.get('missed')} missed)" for r, v in sorted(per.items()))
    if name == "malformed":
        cases = o.get("cases", [])
        return f"{sum(1 for c in cases if c.get('exceptions'))} of {len(cases)} bad values raised on the page ({sum(1 for c in cases if c.get('internals'))} with server internals); {sum(1 for c in cases if c.get('recovered'))} recovered"
    return json.dumps(o)[:160]


class _Get:
    def __init__(self, o: dict) -> None:
        self.o = o

    def __call__(self, name: str, fmt: str = "") -> str:
        value = self.o.get(name)
        return "?" if value is None else format(value, fmt)


def verdict(row: dict, goals: Goals) -> list[str]:
    """The goals a row missed: the issue's four (victim, memory, threads, followers) and the attack's own."""
    missed = []
    v = row.get("victim")
    if v is not None:
        if v["steps"] == 0:
            missed.append("the victim made no Step")
        elif v["p95"] is not None and v["p95"] > goals.victim_p95_s:
            missed.append(f"victim p95 {v['p95']:.2f} s > {goals.victim_p95_s:g} s")
        if v["failures"]:
            missed.append(f"{v['failures']} victim Step(s) failed")
    for rid, r in sorted(row.get("replicas", {}).items()):
        if goals.rss_budget_mb and r["rss_peak_mb"] > goals.rss_budget_mb:
            missed.append(f"{rid} RSS {r['rss_peak_mb']:,.0f} MB > {goals.rss_budget_mb:,.0f} MB")
        if r["threads_after"] - r["threads_before"] > goals.thread_slack:
            missed.append(f"{rid} threads {r['threads_before']} -> {r['threads_after']}")
        if r["restarted"]:
            missed.append(f"{rid} was started again (pids {r['pids']})")
    f = row.get("followers")
    if f is not None:
        if f["p95"] is not None and f["p95"] > goals.follower_p95_s:
            missed.append(f"followers' redraw p95 {f['p95']:.2f} s > {goals.follower_p95_s:g} s")
        if f["missed"]:
            missed.append(f"followers missed {f['missed']} redraws")
    return missed + list(row.get("own_missed", []))


def _cell_victim(v: dict | None) -> str:
    if v is None:
        return "n/a"
    if not v["steps"]:
        return "no Step"
    return f"{v['p50']} / {v['p95']} / {v['max']} s ({v['failures']} failed)"


def _cell_rss(replicas: dict) -> str:
    return "; ".join(f"{rid} {r['rss_before_mb']:,.0f} → {r['rss_peak_mb']:,.0f}" for rid, r in sorted(replicas.items())) or "n/a"


def _cell_threads(replicas: dict) -> str:
    return "; ".join(f"{rid} {r['threads_before']} → {r['threads_after']}" for rid, r in sorted(replicas.items())) or "n/a"


def markdown_table(rows: list[dict], machine: dict) -> str:
    """The report: one line on the conditions, then one row per attack."""
    head = (
        f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, {machine.get('date', '?')}; 1-minute load average "
        f"{machine.get('load_before', '?')} → {machine.get('load_after', '?')}; {machine.get('replicas', '?')} replicas; RSS budget "
        f"{machine.get('rss_budget_mb', 0):,.0f} MB per replica; owner settings: {machine.get('owner_env') or 'none'}"
    )
    lines = [head, "", "| attack | what happens now | victim Step p50 / p95 / max (failed) | RSS MB before → peak | threads before → after | followers' redraw p95 | verdict |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        f = r.get("followers")
        follow_cell = "n/a" if f is None else f"{f['p95']} s ({f['missed']} missed)"
        missed = r.get("missed", [])
        verdict_cell = "meets the goals" if not missed else "misses: " + "; ".join(missed)
        cells = [f"{r['number']} {r['name']}", r["what"], _cell_victim(r.get("victim")), _cell_rss(r.get("replicas", {})), _cell_threads(r.get("replicas", {})), follow_cell, verdict_cell]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines)


def build_row(attack: Attack, outcome: dict, victim: dict | None, replicas: dict, followers: dict | None, goals: Goals) -> dict:
    """One attack's row: its numbers, the line that describes it, and the goals it missed."""
    row = {"number": attack.number, "name": attack.name, "outcome": outcome, "victim": victim, "replicas": replicas, "followers": followers}
    row["own_missed"] = attack.judge(outcome, goals) + ([f"the attack did not run: {outcome['error'][:100]}"] if outcome.get("error") else [])
    row["what"] = describe(attack.name, outcome)
    row["missed"] = verdict(row, goals)
    return row


# --- the harness: the room, the victim, the sampler, the presenter -------------------------------------------------


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
    sweep: dict = field(default_factory=lambda: {KEY_BENCH_PER_CATEGORY: 2, KEY_BENCH_REPEATS: 5, KEY_BENCH_NEW: 128})

    @classmethod
    def quick(cls) -> Config:
        return cls(
            victim_every_s=1.0, attack_s=120.0, settle_s=60.0, baseline_s=3.0, lab_chars=100, step_chars=60, clears=2, followers=2, presenter_steps=2,
            think_s=1.5, guess_s=4.0, memory_sessions=2, memory_s=4.0, max_prompt_tokens=128, flood_s=3.0, spam_s=2.0, k_rounds=3,
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


# --- the attacks ----------------------------------------------------------------------------------------------------


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
    return {"by_threads": by_threads, "presentation_after": h.presentations().read() is not None}


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
            setups.append(_probe('--server.address "" on loopback, no proxy header (the owner: control)', f"http://127.0.0.1:{port}", False))
    return {"machine_address": address, "setups": setups}


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
    board = h.presentations().board_path(presentation_id)
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


@dataclass(frozen=True)
class Attack:
    number: str  # the issue's item
    name: str
    run: Callable[[Harness, Config], dict]
    judge: Callable[[dict, Goals], list[str]]
    env: tuple[tuple[str, str], ...] = ()  # owner settings of its own: a room of its own
    replicas: int | None = None  # that room's replicas (None: --replicas)
    victim: bool = True


ATTACKS: tuple[Attack, ...] = (
    Attack("1", "token-lab", attack_token_lab, judge_token),
    Attack("1", "token-step", attack_token_step, judge_token),
    Attack("2", "clear-cache", attack_clear_cache, judge_clear_cache),
    Attack("3", "key-guess", attack_key_guess, judge_key_guess),
    Attack("4", "memory", attack_memory, judge_memory),
    Attack("5", "owner", attack_owner, judge_owner, victim=False),
    Attack("6", "run-flood", attack_run_flood, judge_run_flood, env=(("SPECVIZ_RUN_DIR_MAX_MB", "1"),)),
    Attack("6", "presenter-reload", attack_presenter_reload, judge_presenter_reload),
    Attack("6", "adaptive-k", attack_adaptive_k, judge_adaptive_k, env=(("SPECVIZ_MAX_DRAFT_TOKENS", "2"),), replicas=1, victim=False),
    Attack("6", "long-job", attack_long_job, judge_long_job),
    Attack("6", "malformed", attack_malformed, judge_malformed),
)
BY_NAME = {a.name: a for a in ATTACKS}


def parse_attacks(text: str | None) -> list[Attack]:
    """--attacks a,b,c (names; all when empty), in the issue's order."""
    if not text:
        return list(ATTACKS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown attack(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [a for a in ATTACKS if a.name in names]


def groups(attacks: list[Attack]) -> list[tuple[tuple[tuple[str, str], ...], int | None, list[Attack]]]:
    """Attacks sharing owner settings share a room: the plain room's first, then each special one."""
    out: dict[tuple, list[Attack]] = {}
    for a in attacks:
        out.setdefault((a.env, a.replicas), []).append(a)
    return [(env, replicas, members) for (env, replicas), members in sorted(out.items(), key=lambda kv: (bool(kv[0][0]), str(kv[0])))]


# --- running it -----------------------------------------------------------------------------------------------------


def machine_info() -> dict:
    cpu = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "date": datetime.date.today().isoformat()}


def run_group(env: dict[str, str], replicas: int, attacks: list[Attack], args, cfg: Config, goals: Goals, baseline: bool) -> list[dict]:
    """One room (its owner settings), the victim and the sampler, then each attack in turn."""
    import secrets

    rows = []
    key = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="specviz-attacks-") as tmp, room(replicas, Path(tmp), {**env, "SPECVIZ_PRESENTER_KEY": key}) as handle:
        h = Harness(handle, Path(tmp) / "runs", key, cfg, env)
        warm_replicas(h)
        with Sampler(h):
            if any(a.victim for a in attacks):
                h.victim = Victim(h, cfg.victim_every_s)
                h.victim.start()
                h.victim.warm(cfg.settle_s)
            try:
                if baseline and h.victim is not None:
                    t0 = time.monotonic()
                    time.sleep(cfg.baseline_s)
                    t1 = h.victim.settle(t0, cfg.settle_s)
                    rows.append(build_row(Attack("-", "none (the victim alone)", lambda *_: {}, judge_token), {}, victim_stats(h.victim.samples, t0, t1), resource_stats(h.samples, t0, t1), None, goals))
                    rows[-1]["what"] = "the victim alone, before any attack"
                for attack in attacks:
                    rows.append(run_attack(h, attack, cfg, goals))
                    log.info("%s: %s | missed: %s", attack.name, rows[-1]["what"], rows[-1]["missed"] or "none")
            finally:
                if h.victim is not None:
                    h.victim.stop()
        if args.keep_log:
            Path(args.keep_log).mkdir(parents=True, exist_ok=True)
            (Path(args.keep_log) / f"room-{'-'.join(a.name for a in attacks)}.log").write_bytes(handle.log_path.read_bytes())
    return rows


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


def run_attack(h: Harness, attack: Attack, cfg: Config, goals: Goals) -> dict:
    log.info("attack %s %s", attack.number, attack.name)
    t0 = time.monotonic()
    try:
        outcome = attack.run(h, cfg)
    except (Exception, SystemExit) as exc:  # SystemExit: a room of its own did not start
        log.exception("attack %s failed", attack.name)
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    t_end = time.monotonic()
    t1 = h.victim.settle(t_end, cfg.settle_s) if h.victim is not None and attack.victim else t_end + SAMPLE_EVERY_S * 2
    time.sleep(max(0.0, t1 + SAMPLE_EVERY_S * 2 - time.monotonic()))  # the sampler's reading after the attack
    victim = victim_stats(h.victim.samples, t0, t1) if h.victim is not None and attack.victim else None
    followers = outcome.pop("followers", None)
    window = outcome.pop("resources_window", None)  # an attack that sets up more than it attacks (the presenter and its followers)
    r0, r1 = (window[0], window[1] + SAMPLE_EVERY_S * 2) if window and window[1] else (t0, t1 + SAMPLE_EVERY_S * 2)
    return build_row(attack, outcome, victim, resource_stats(h.samples, r0, r1), followers, goals)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", default="", help=f"comma-separated, all by default: {', '.join(BY_NAME)}")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="each attack tiny (seconds): checks the script, measures nothing")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the raw numbers here")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="the owner's token budget (SPECVIZ_MAX_PROMPT_TOKENS; the memory attack's prompt); default 1024")
    parser.add_argument("--owner-env", action="append", default=[], metavar="NAME=VALUE", help="more owner settings for every room (repeat): a KV-token budget, key limits, ...")
    parser.add_argument("--rss-budget-mb", type=float, default=None, help="the most one replica may hold (default: a quarter of this machine's memory)")
    parser.add_argument("--thread-slack", type=int, default=2, help="threads a replica may gain during an attack")
    parser.add_argument("--max-guesses-per-min", type=float, default=10.0, help="the key-guess attack's goal: keys checked a minute, per thread count")
    parser.add_argument("--victim-every-s", type=float, default=None)
    parser.add_argument("--followers", type=int, default=None)
    parser.add_argument("--clears", type=int, default=None)
    parser.add_argument("--guess-s", type=float, default=None)
    parser.add_argument("--memory-sessions", type=int, default=None)
    parser.add_argument("--attack-s", type=float, default=None, help="the longest one attacker's click is waited for")
    parser.add_argument("--settle-s", type=float, default=None, help="the longest to wait after an attack for the victim's next Step")
    parser.add_argument("--spam-per-s", type=float, default=None, help="Steps a second on a finished run (run-flood)")
    parser.add_argument("--keep-log", default=None, metavar="DIR", help="copy each room's log (the replicas' output) here")
    parser.add_argument("--timeout-s", type=float, default=4 * 3600, help="give up after this long")
    args = parser.parse_args(argv)
    try:
        args.selected = parse_attacks(args.attacks)
        args.owner = dict(_name_value(x) for x in args.owner_env)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def _name_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
        raise ValueError(f"--owner-env {text!r} is not NAME=VALUE")
    return name, value


def config_from(args) -> Config:
    cfg = Config.quick() if args.quick else Config()
    for name in ("victim_every_s", "followers", "clears", "guess_s", "memory_sessions", "attack_s", "settle_s", "spam_per_s", "max_prompt_tokens"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    return cfg


def default_rss_budget_mb() -> float:
    import psutil

    return psutil.virtual_memory().total / 2**20 / 4


def exit_code(rows: list[dict]) -> int:
    return 1 if any(r["missed"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lp.start_run(args.timeout_s)
    cfg = config_from(args)
    goals = Goals(rss_budget_mb=args.rss_budget_mb if args.rss_budget_mb is not None else default_rss_budget_mb(), thread_slack=args.thread_slack, max_guesses_per_min=args.max_guesses_per_min)
    owner = {"SPECVIZ_MAX_PROMPT_TOKENS": str(cfg.max_prompt_tokens), **args.owner}
    machine = {**machine_info(), "replicas": args.replicas, "rss_budget_mb": goals.rss_budget_mb, "owner_env": " ".join(f"{k}={v}" for k, v in owner.items()), "quick": args.quick}
    machine["load_before"] = round(os.getloadavg()[0], 2)
    rows: list[dict] = []
    try:
        for i, (env, replicas, members) in enumerate(groups(args.selected)):
            rows += run_group({**owner, **dict(env)}, replicas or args.replicas, members, args, cfg, goals, baseline=i == 0 and not env)
    except SystemExit as exc:  # the room did not start
        print(exc, file=sys.stderr)
        return 2
    machine["load_after"] = round(os.getloadavg()[0], 2)
    order = {a.name: i for i, a in enumerate(ATTACKS)}
    rows.sort(key=lambda r: order.get(r["name"], -1))
    if args.quick:
        print("(--quick: tiny attacks; these figures check the script and measure nothing)")
    print(markdown_table(rows, machine))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "goals": asdict(goals), "config": asdict(cfg), "rows": rows}, indent=1, default=str))
    return exit_code(rows)

