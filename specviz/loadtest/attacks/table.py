"""The report's table: a line on the conditions, then one row per attack (what happens now, the victim's Step, RSS,
threads, the followers' redraw, the verdict); build_row makes a row from what an attack recorded."""

from __future__ import annotations

import json

from specviz.loadtest.attacks.catalogue import Attack
from specviz.loadtest.attacks.goals import Goals, verdict
from specviz.workshop import presenter_key as pk


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
        if "teacher_presented" in o:
            teacher = "presented" if o["teacher_presented"] else "was LOCKED OUT"
            parts.append(f"{pk.ROOM_MAX_WRONG} addresses locked the room ({o.get('lockers_checked', '?')} checked, {o.get('lockers_limited', '?')} refused unseen); the teacher's right key from another address {teacher}")
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
    return _describe_default_deny(name, o, g) or json.dumps(o)[:160]


def _describe_default_deny(name: str, o: dict, g: _Get) -> str | None:
    """describe() for the attacks on the doors a default-deny shared mode closes; None for any other name."""
    if name == "backmsgs":
        said = {True: "answered", False: "dropped", None: "?"}
        closed = "the websocket closed" if o.get("closed") else "the websocket stayed open"
        return (f"{g('kinds_sent')} kinds from a session that ran no script: one name {said[o.get('one_name_answered')]}, two names "
                f"{said[o.get('two_names_answered')]}; {g('frame_names', ',')} names ({g('frame_mb')} MB) {said[o.get('frame_answered')]}, {closed}; "
                f"health {g('health_s')} s; {g('refused_lines')} refusals logged")  # fmt: skip
    if name == "uploads":
        return (f"{g('upload_mb')} MB PUTs under made-up ids: {o.get('made_up', '?')}; under minted ids: {o.get('minted', '?')}; "
                f"60 MB declared: {g('over_largest')}; 10 MB declared on the race page: {g('over_race_cap')}")  # fmt: skip
    if name == "kv-hog":
        new, extra = o.get("newcomer") or {}, o.get("extra") or {}

        def said(got: dict, ran: str) -> str:  # a refusal's first clause says which rule refused it
            return "?" if not got else ran if got.get("ran") else "was refused: " + str(got.get("message")).split(";")[0][:160]

        return (f"one address: {g('hog_sessions')} sessions until the budget ({g('budget', ',')} KV tokens) refused one; another address's run "
                f"{said(new, 'ran')}; the hog's next {said(extra, 'ran (over its share)')}; {g('hogs_stepped_again')} of its sessions stepped again "
                f"(said: {(o.get('hog_said_after') or ['nothing'])[0].split(';')[0][:120]})")  # fmt: skip
    if name == "race":
        return f"{g('races')} races of {g('new_tokens')} new tokens back to back on r1 (seconds each: {o.get('race_s', '?')}); the page said: {(o.get('said') or ['nothing'])[0][:100]}"
    if name == "serve":
        v = o.get("victim") or {}
        return (f"no key {g('no_key')}, wrong key {g('wrong_key')}, 100 MB declared {g('huge_body')}, a form post {g('form_post')}, 5,000 digits "
                f"{g('huge_integer')}; {g('slow_conns')} slowloris connections for {g('hold_s')} s: {g('slow_closed')} closed by the server "
                f"(last after {g('slow_closed_after_s')} s), {g('slow_held')} still open; a stream nobody reads: {g('stalled_reader')}; /health "
                f"{g('health_s')} s; the service's victim p50 / p95 / max {v.get('p50')} / {v.get('p95')} / {v.get('max')} s ({v.get('failures')} failed); "
                f"RSS {g('rss_before_mb', ',.0f')} → {g('rss_peak_mb', ',.0f')} MB")  # fmt: skip
    if name == "conn-flood":
        return f"{g('connections')} connections held open from one address (limit {g('limit')}): {g('answered')} answered, {g('refused')} closed unanswered"
    if name == "guesses":
        own = {True: "a file of its own", False: "the OLD file", None: "?"}[o.get("new_exercise_own_file")]
        return f"one session submitted its guess {g('clicks')} times (A, B, A, ...) in {g('seconds')} s: {g('lines')} line(s), {g('bytes')} bytes in the exercise's votes file; a new exercise's guess went to {own}"
    return None


class _Get:
    def __init__(self, o: dict) -> None:
        self.o = o

    def __call__(self, name: str, fmt: str = "") -> str:
        value = self.o.get(name)
        return "?" if value is None else format(value, fmt)


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
