"""python -m specviz profile: this machine's cost profile (a target pass over 1..17 tokens, each drafter's cost per
token), measured by specviz.experiments.cost_profile."""

from __future__ import annotations

import argparse
import json

from specviz.cli.options import MODEL_OPTIONS, add_run_options, batch_sizes_arg, model_access, set_threads
from specviz.cli.terminal import emit


def add_parser(sub) -> None:
    """Register `profile` on the CLI's subparsers."""
    p = sub.add_parser("profile", help="this machine's cost profile: a target pass over 1..17 tokens, and each drafter's cost per token")
    add_run_options(p, only=MODEL_OPTIONS)
    p.add_argument("--context", type=int, default=256, help="tokens already cached before each timed pass (default 256)")
    p.add_argument("--max-tokens", type=int, default=17, help="time passes over 1..N new tokens (default 17: k = 0..16)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats; the profile keeps medians (default 5)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall clock (synchronised), or process CPU time (CPU only; steadier on a shared machine)")
    p.add_argument("--label", default="", help="a short name for the theory page's menu")
    p.add_argument("--batch", type=batch_sizes_arg, default=(), metavar="B,B,...",
                   help="also time passes over B rows at once (e.g. 1,2,4,8,16,32), kept as batch_pass_ms")
    p.add_argument("--out", default=None, help="write the profile here as JSON")
    p.add_argument("--save", action="store_true",
                   help="keep it in the cache folder: k: auto then prices this target's runs on this machine (same precision and "
                        "threads) with it, not the profile shipped for a 2-core CPU ($SPECVIZ_PROFILE still comes first)")


def run(args: argparse.Namespace) -> int:
    from specviz.experiments.cost_profile import batch_profile_table, measure_profile, profile_table
    from specviz.models import load_model

    set_threads(args.threads)
    target = load_model(args.target, args.device, args.dtype, **model_access(args))
    emit(f"profiling {target.name} on {target.device} ({target.precision}), context {args.context} tokens", err=True)

    def progress(done: int, total: int, message: str) -> None:
        emit(f"[{done}/{total}] {message}", err=True, flush=True)

    profile = measure_profile(target, max_tokens=args.max_tokens, context_length=args.context, repeats=args.repeats,
                              threads=args.threads, clock=args.clock, on_progress=progress, label=args.label,
                              batch_sizes=args.batch)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(profile.to_json(), fh, indent=1)
            fh.write("\n")
        emit(f"wrote {args.out}", err=True)
    if args.save:
        from specviz.runs import saved_profile_path

        saved = saved_profile_path(target)
        saved.parent.mkdir(parents=True, exist_ok=True)
        partial = saved.with_suffix(".part")
        partial.write_text(json.dumps(profile.to_json(), indent=1) + "\n", encoding="utf-8")
        partial.replace(saved)  # whole or not at all, for a run that reads it meanwhile
        emit(f"saved {saved}: k: auto prices {target.name} ({target.precision}) on this machine with it from now on", err=True)
    emit(f"{profile.device_name}; {profile.dtype}; torch {profile.torch_version}; {profile.threads} threads; {profile.clock} clock; load average {profile.load_average}")
    emit(" k  tokens fed  pass ms  verify cost c_verify(k)")
    for k, ms, cost in profile_table(profile):
        emit(f"{k:2d}  {k + 1:10d}  {ms:7.2f}  {cost:6.2f}")
    for name, c in profile.draft_cost.items():
        emit(f"draft cost c, {name}: {c:.4f} of a 1-token pass ({profile.draft_ms_per_token[name]:.3f} ms per drafted token)")
    if profile.batch_pass_ms:
        emit("  B   t  pass ms  ms per row-token")
        for b, t, ms, per_token in batch_profile_table(profile):
            emit(f"{b:3d} {t:3d}  {ms:7.2f}  {per_token:7.3f}")
    return 0
