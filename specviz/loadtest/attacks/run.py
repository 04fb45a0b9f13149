"""Attacks on a shared room, one at a time, against `python -m specviz room --replicas 2`, with a victim stepping
beside them: what each attack does to another participant, to the replicas' memory and threads, and to the
presenter's followers; and `specviz serve` as anyone on the network reaches it.

    python scripts/room_attacks.py --json attacks.json          # every attack (15-20 minutes on a quiet 2-core machine)
    python scripts/room_attacks.py --attacks clear-cache,key-guess
    python scripts/room_attacks.py --quick                      # each attack tiny: checks the script, measures nothing

The table in docs/workshop-safety.md ("Attacks on a room: what happens now") is this script's output on a quiet
machine (nothing else running; check `uptime` first), pasted as printed: the conditions line, then one row per
attack, the default-deny rows (42.1 backmsgs ... 42.8 conn-flood) among them:

    python scripts/room_attacks.py --json attacks.json --rss-budget-mb 3500 --owner-env SPECVIZ_MAX_KV_TOKENS=40000
    python scripts/room_attacks.py --attacks backmsgs,uploads,kv-hog,race,serve,conn-flood,guesses --json attacks-42.json \\
        --rss-budget-mb 3500 --owner-env SPECVIZ_MAX_KV_TOKENS=40000          # the default-deny rows only (about 10 minutes)

Replace the rows of the attacks you ran (their first cell: item and name) and the conditions line above them; say in
the text when the machine was loaded. Rows the script does not produce (42.8's session-cap, race-file and secrets:
tests, not attacks) stay as written.

The room starts in shared mode (the room's own default) with a random presenter key in its environment, a fresh
SPECVIZ_RUN_DIR, SPECVIZ_MAX_PROMPT_TOKENS from --max-prompt-tokens and any further owner setting from --owner-env
NAME=VALUE (a KV-token budget, key limits: whatever the owner would set). A *victim* (the protocol client,
specviz.loadtest.protocol) opens the step-through page on replica r1 (the balancer's sticky cookie) and presses Step
about every --victim-every-s seconds for the whole run, Reset when its run ends. A sampler reads every replica's RSS
and thread count (psutil, the pids in the room's status file) twice a second. Attacks that need an owner setting of
their own (a 1 MB run directory, k capped at 2, a room started with SPECVIZ_MODE=local) get a room of their own.

The attacks (--attacks, all by default; the report table's item in brackets). Attackers go to r1, the victim's replica,
as a hostile participant would (the sticky cookie is theirs to set); the presenter presents from r2.
  token-lab         [1] the Exactness lab's fast mode with 3,000 x U+10380 (12,000 tokens)
  token-step        [1] the step-through page with 2,000 x U+10380 and Compare side by side set to early exit
  clear-cache       [2] --clears `clear_cache` messages from a raw client (each followed by a rerun, which loads what
                        was cleared), with a presenter and --followers followers: model loads in r1's log, pushes per
                        presenter Step before and after, and whether the sender's presenter-key back-off survives
  key-guess         [3] wrong presenter keys from 1 and from 4 client threads, --guess-s each, a fresh session
                        whenever one is refused (as an attacker would): keys checked per minute, refusals, errors;
                        then ten addresses lock the room and the teacher, from another, still presents
  memory            [4] --memory-sessions sessions at the token budget (prompt at --max-prompt-tokens, max new
                        tokens at the cap, compare with early exit) stepping, then one more: its message
  owner             [5] do participants get owner powers (trust remote code, downloads, pickle) through the room's
                        balancer with X-Forwarded-For, through a room started with SPECVIZ_MODE=local (bound to
                        0.0.0.0, reached at this machine's non-loopback address), and from `streamlit run app.py
                        --server.address ""` (non-loopback address; loopback with a proxy header; a page at a
                        DNS-rebinding name, another site's page, a visitor through a proxy that adds no header;
                        loopback alone is the owner: the control)
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
  backmsgs       [42.1] from a session that ran no script: every BackMsg kind (twice), a two-name and then a
                        --frame-names file_urls_request: which were answered, the replica's health latency right
                        after, refusals in its log (unbounded, a million names held a replica 14 s, +974 MB)
  uploads        [42.2] PUTs of 10 MB under made-up ids, under minted ids past the session's caps, a body over the
                        largest upload and one over the race page's cap (by Content-Length): each status
  kv-hog         [42.5] a room of its own (one replica, SPECVIZ_MAX_KV_TOKENS=catalogue.KV_HOG_BUDGET): one address
                        opens sessions of a 256-token run (at most --hog-sessions) until the budget refuses one, waits
                        until they are idle, then another address asks for the same run (is a hog's idle run freed
                        for it?), the hog asks once more (over its fair share: refused?), and its sessions Step again
  race           [42.6] --races races of --race-new-tokens on the race page, back to back, beside the victim
  serve          [42.7] a `specviz serve` of its own (loopback, an API key) and a client of its own asking for 8
                        tokens about every --victim-every-s: a request without the key and with a wrong one, 100 MB
                        declared, a form post, a 5,000-digit number, --serve-slow-conns slowloris connections and a
                        stream nobody reads, held --serve-hold-s (past the service's 30 s deadlines): each status,
                        /health's latency, the client's latency and failures, the service's RSS
  conn-flood     [42.8] the room's per-source connection limit plus 10 connections from one address, held open,
                        then a health check on each: how many were answered
  guesses        [42.8] an exercise (its truth file, as serve-pair writes it) and one session submitting its guess
                        --guess-clicks times, A and B in turn: lines and bytes in the votes file; a new exercise's
                        guess goes to a file of its own

Each attack is bounded (--attack-s, and its own size flags); after it, the script waits until the victim finished a
Step it started after the attack ended (at most --settle-s): that Step counts for the attack. Per attack: the
victim's Step (click to drawn, client side) p50 / p95 / max and failures (a Step that did not advance the run, an
exception, a dropped connection), each replica's RSS before / peak / after and threads before / after, the
followers' redraw p95 where there are followers, and the attack's own outcome.

Printed: a markdown table (attack, what happens now, victim Step, RSS, threads, followers, verdict) under a line with
the CPU (lscpu), the date and the 1-minute load average before and after. The verdict checks the room's goals
(victim p95 <= 3 s and no Step fails, every replica's RSS under --rss-budget-mb, threads at most --thread-slack more
after than before, followers' redraw p95 <= 1.5 s) and each attack's own (owner powers never reach a participant,
keys checked per minute <= --max-guesses-per-min, k within the cap, runs survive a flood, a finished run's Step adds
nothing to the board, no traceback, the presenter can end or reclaim a presentation after a reload, ...). --json FILE
writes the raw numbers. Exits 1 when a goal is missed (2 when the room cannot start).

Nothing here depends on the app's exact messages where an outcome can be read instead (a rounds metric, the run
directory, the presentation file); the widget keys, labels and the few message patterns it does use are in one
place: app_facts.py in this package.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.catalogue import ATTACKS, BY_NAME, Attack, groups, parse_attacks
from specviz.loadtest.attacks.goals import Goals, judge_token, resource_stats, victim_stats
from specviz.loadtest.attacks.harness import SAMPLE_EVERY_S, Config, Harness, Sampler, Victim, warm_replicas
from specviz.loadtest.attacks.table import build_row, markdown_table
from specviz.loadtest.room import room

log = logging.getLogger("room_attacks")


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
    parser = argparse.ArgumentParser(prog="python scripts/room_attacks.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    parser.add_argument("--frame-names", type=int, default=None, help="names in the backmsgs attack's file_urls_request")
    parser.add_argument("--hog-sessions", type=int, default=None, help="the most sessions the kv-hog opens")
    parser.add_argument("--races", type=int, default=None, help="races back to back (race)")
    parser.add_argument("--race-new-tokens", type=int, default=None, help="each race's max new tokens")
    parser.add_argument("--serve-slow-conns", type=int, default=None, help="slowloris connections to the service (serve)")
    parser.add_argument("--guess-clicks", type=int, default=None, help="one session's guesses in the exercise (guesses)")
    parser.add_argument("--serve-hold-s", type=float, default=None, help="how long serve's slow connections and unread stream are held")
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
    for name in ("victim_every_s", "followers", "clears", "guess_s", "memory_sessions", "attack_s", "settle_s", "spam_per_s", "max_prompt_tokens", "frame_names",
                 "hog_sessions", "races", "race_new_tokens", "serve_slow_conns", "serve_hold_s", "guess_clicks"):
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
