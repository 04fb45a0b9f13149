"""`python -m specviz serve-pair`: the room exercise's two services, one speculating and one plain, which is which
chosen at random and kept from everyone but the room's store (specviz.workshop.race_room), until the teacher reveals it.

Both are ordinary `python -m specviz serve` processes with --hide-truth and one served model id, so nothing in their
answers, headers or /v1/models tells them apart: only the timing does. They run one after the other on the CPU only
when asked; the supervisor stops both when it is stopped (Ctrl+C, SIGTERM) or when one of them dies, and a child
gets SIGTERM if the supervisor itself is killed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Sequence

from specviz.workshop.processes import answers_ok, die_with_parent, stop_processes
from specviz.workshop.race_room import Pair, RaceRoom

START_TIMEOUT_S = 300.0


def run_pair(commands: Sequence[Sequence[str]], roots: Sequence[str], pair: Pair, room: RaceRoom, say: Callable[..., None]) -> int:
    """Start the services (commands[i] listens at roots[i]), write the truth once both answer, supervise until stopped."""
    stopping = False

    def ask_stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, ask_stop)
    procs = [subprocess.Popen(list(cmd), preexec_fn=die_with_parent) for cmd in commands]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(answers_ok(f"{r}/health") for r in roots):
            if stopping:
                return 0
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                say("error: a service did not start (see its messages above)", err=True)
                return 1
            time.sleep(0.5)
        room.start_pair(pair)
        urls = ",".join(s.url for s in pair.services)
        say(f"serve-pair: service A at {pair.services[0].url}, service B at {pair.services[1].url}; which one speculates is "
            f"written to {room.store.description} for the reveal. Start the app on the same store (SPECVIZ_STORE, or "
            f"SPECVIZ_RUN_DIR) with\n  SPECVIZ_PROBE_URLS={urls} SPECVIZ_PRESENTER_KEY=... streamlit run app.py --server.address 0.0.0.0\n"
            "(Ctrl-C stops both services.)", err=True, flush=True)  # fmt: skip
        while not stopping:
            if any(p.poll() is not None for p in procs):
                say("error: a service stopped; stopping the other", err=True)
                return 1
            time.sleep(0.5)
        return 0
    finally:
        stop_processes(procs)
