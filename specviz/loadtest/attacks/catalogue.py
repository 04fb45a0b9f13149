"""The attacks by name, in the report table's order (its first cell, the item, names the row): what each runs, how it is judged, the owner settings
of its own (a room of its own) and whether the victim steps beside it; parse_attacks reads --attacks, groups shares
rooms."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specviz.loadtest.attacks.access import attack_clear_cache, attack_key_guess, attack_owner
from specviz.loadtest.attacks.doors import attack_backmsgs, attack_conn_flood, attack_guesses, attack_uploads
from specviz.loadtest.attacks.goals import (
    Goals,
    judge_adaptive_k,
    judge_backmsgs,
    judge_clear_cache,
    judge_conn_flood,
    judge_guesses,
    judge_key_guess,
    judge_kv_hog,
    judge_long_job,
    judge_malformed,
    judge_memory,
    judge_owner,
    judge_presenter_reload,
    judge_race,
    judge_run_flood,
    judge_serve,
    judge_token,
    judge_uploads,
)
from specviz.loadtest.attacks.harness import Config, Harness
from specviz.loadtest.attacks.inputs import attack_malformed, attack_memory, attack_token_lab, attack_token_step
from specviz.loadtest.attacks.runs import attack_adaptive_k, attack_long_job, attack_presenter_reload, attack_run_flood
from specviz.loadtest.attacks.service import attack_serve
from specviz.loadtest.attacks.shares import attack_kv_hog, attack_race

KV_HOG_BUDGET = "2600"  # KV tokens: about four of the hog's runs (shares.HOG_QUERY) and the victim's; the owner's setting for kv-hog's room


@dataclass(frozen=True)
class Attack:
    number: str  # the item, the report table's first cell
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
    Attack("42.1", "backmsgs", attack_backmsgs, judge_backmsgs),  # the doors a default-deny shared mode closes, from here
    Attack("42.2", "uploads", attack_uploads, judge_uploads),
    Attack("42.5", "kv-hog", attack_kv_hog, judge_kv_hog, env=(("SPECVIZ_MAX_KV_TOKENS", KV_HOG_BUDGET),), replicas=1),
    Attack("42.6", "race", attack_race, judge_race),
    Attack("42.7", "serve", attack_serve, judge_serve, victim=False),  # a `specviz serve` of its own, with its own victim
    Attack("42.8", "conn-flood", attack_conn_flood, judge_conn_flood),
    Attack("42.8", "guesses", attack_guesses, judge_guesses),
)
BY_NAME = {a.name: a for a in ATTACKS}


def parse_attacks(text: str | None) -> list[Attack]:
    """--attacks a,b,c (names; all when empty), in the report table's order."""
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
