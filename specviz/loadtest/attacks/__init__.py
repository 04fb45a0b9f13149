"""Attacks on a shared room, one at a time, with a victim stepping beside them (scripts/room_attacks.py; run.py's
docstring says what each attack does and what the report means). The modules, bottom up (no cycles):
  app_facts   what the attacks know of the app: pages, widget keys, labels, message patterns (one place)
  goals       the goals, the samples, the report's numbers (victim, resources, redraws), judge_* per attack, verdict
  harness     Config (every attack's sizes), Harness (one room), the session helpers, Victim, Sampler, Presenting
  inputs      token-lab, token-step, memory, malformed: oversized or malformed input
  access      clear-cache, key-guess, owner: the presenter key, the cache, owner powers
  runs        run-flood, presenter-reload, adaptive-k, long-job: runs, forks and the presentation
  doors       backmsgs, uploads, conn-flood, guesses: every BackMsg kind and hostile sizes, uploads past every cap,
              connections past the balancer's per-source limit
  shares      kv-hog, race: one address filling the KV budget, races back to back
  service     serve: `specviz serve` of its own and raw sockets against it
  catalogue   Attack, ATTACKS (the report table's order), BY_NAME, parse_attacks, groups (attacks that share a room)
  table       describe, build_row, markdown_table: the report's rows and text
  run         the command line: parse_args, config_from, run_group, run_attack, main
Import each name from the module that defines it; this package re-exports nothing.
"""
