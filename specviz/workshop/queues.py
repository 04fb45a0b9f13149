"""Fair sharing of a loaded model between browser sessions: one queue per model, a bounded number in flight, and
the turns shared out by client address (round robin over the addresses waiting, first come first served within one).

Plain Python (threading), no streamlit. A session takes a *turn* for one whole round (draft + verify), so the round's
own timing (measured inside the engine's step()) never includes time spent waiting here, and Play / Run to end, which
take one turn per round, cannot starve the sessions queued behind them. The plain-decoding baseline that times the
runs (specviz.workshop.baselines) takes *background* turns, one plain step each: admitted only when no round is waiting.

    with model_queue(key).turn(on_wait=lambda ahead, waited_s: ..., timeout_s=120):
        decoder.step()

Fair by client, not by session: one participant who opens ten tabs (or ten websocket sessions) and clicks Step in all
of them has one place in the rotation, so another participant's Step waits for at most one of their turns per turn of
every other address waiting, not for all ten (docs/workshop-safety.md). Behind one NAT a whole room is one
address, and the order is then first come, first served, as it was.

A long prefill is the one piece of work longer than a round: it runs in chunks, and between two it may hand its turn to
the first waiter and queue again at the back of its line (held_turn() and HeldTurn.pass_on()), so a Step waits for one
chunk, never for a whole prefill (docs/workshop-safety.md: Token and memory budgets).

Each turn says what kind of work it is (TurnKind): a participant's "step" (a round, a prefill, a restore), one piece
of a long "job" (a benchmark sweep, a lab), or "background" (the baselines). Admission does not look at it; what does
is whoever waits for Steps only (the room's presentation watcher, specviz.ui.room.push: turns_in_flight("step")).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Literal

log = logging.getLogger(__name__)


TurnKind = Literal["step", "job", "background"]

THREADS_ENV = "SPECVIZ_TORCH_THREADS"
MAX_CLIENTS_REMEMBERED = 4096  # client addresses whose last turn a queue remembers


def server_threads(environ: dict[str, str] | os._Environ = os.environ) -> int | None:
    """torch's intra-op threads for a Streamlit server process: the owner's SPECVIZ_TORCH_THREADS; else None when
    OMP_NUM_THREADS is set (the room sets it per replica, and torch already follows it); else 1.

    Why 1: a server runs torch on many threads (every rerun's script thread, the baselines' worker), and once the
    OpenMP threads they start outnumber the cores, libgomp stops spinning between parallel regions. On the 2-core
    machine here a Step's 9-token verify pass then took 120-165 ms against 40 ms from the command line's one thread
    of two OpenMP threads, and 50-65 ms with one (docs/performance.md)."""
    raw = environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{THREADS_ENV} must be a whole number of at least 1; got {raw!r}.")
        return value
    return None if environ.get("OMP_NUM_THREADS", "").strip() else 1


class QueueTimeout(TimeoutError):
    """Waited too long for a turn; the message says what to do."""


class ModelQueue:
    """Admission in two classes with at most `max_in_flight` holders at a time.

    Interactive waiters (a participant's round or prefill) are always admitted before background ones (the
    plain-decoding baseline, specviz.workshop.baselines). Interactive turns go to the client address served longest ago
    (an address never served first), and within one address first come, first served; a session that finishes a turn
    and asks again goes to the back of its line. Background turns are first come, first served. A background turn
    already in flight is not interrupted: an interactive waiter waits at most for that one turn (one plain decoding
    step)."""

    def __init__(self, name: str, max_in_flight: int = 1) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1; got {max_in_flight}.")
        self.name = name
        self.max_in_flight = max_in_flight
        self._cond = threading.Condition()
        self._line: deque[int] = deque()  # interactive tickets, in order
        self._background: deque[int] = deque()  # background tickets, served only when _line is empty
        self._in_flight = 0
        self._kinds: Counter[str] = Counter()  # turns in flight by kind
        self._tickets = itertools.count()
        self._client_of: dict[int, Hashable] = {}  # interactive ticket -> its client's address (its own ticket when none)
        self._served: dict[Hashable, int] = {}  # client -> when it was last admitted (an admission counter)
        self._admissions = itertools.count()

    # --- what a waiting session can see ------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def in_flight_of(self, kind: TurnKind) -> int:
        with self._cond:
            return self._kinds[kind]

    @property
    def waiting(self) -> int:
        """Interactive waiters (what a participant sees ahead of them)."""
        with self._cond:
            return len(self._line)

    @property
    def waiting_background(self) -> int:
        with self._cond:
            return len(self._background)

    def _priority(self, ticket: int, position: int) -> tuple[int, int]:
        """An interactive ticket's place: its client's last admission (never: -1), then its place in line."""
        return (self._served.get(self._client_of.get(ticket, ticket), -1), position)

    def _next_interactive(self) -> int | None:
        """The interactive ticket admitted next: the client served longest ago, its earliest ticket."""
        if not self._line:
            return None
        return min(self._line, key=lambda t: self._priority(t, self._position(t)))

    def _position(self, ticket: int) -> int:
        return self._line.index(ticket)

    def _ahead(self, ticket: int, background: bool) -> int:
        """Turns that will be served before this ticket, as things stand: those in flight and the waiters placed
        before it (for a background ticket, every interactive waiter too)."""
        if background:
            return self._in_flight + len(self._line) + self._background.index(ticket)
        mine = self._priority(ticket, self._position(ticket))
        return self._in_flight + sum(1 for i, t in enumerate(self._line) if self._priority(t, i) < mine)

    def _may_enter(self, ticket: int, background: bool) -> bool:
        if self._in_flight >= self.max_in_flight:
            return False
        if background:
            return not self._line and self._background[0] == ticket
        return self._next_interactive() == ticket

    def _admitted(self, ticket: int, background: bool) -> None:
        """Take an admitted ticket out of its line (under the lock) and note when its client was served."""
        if background:
            self._background.popleft()
            return
        self._line.remove(ticket)
        client = self._client_of.pop(ticket, ticket)
        self._served[client] = next(self._admissions)
        if len(self._served) > MAX_CLIENTS_REMEMBERED:  # forget the clients served longest ago (they come first again)
            for old in sorted(self._served, key=self._served.__getitem__)[: len(self._served) // 2]:
                del self._served[old]

    # --- taking a turn ---------------------------------------------------------------------------------------

    @contextmanager
    def turn(self, on_wait: Callable[[int, float], None] | None = None, **options) -> Iterator[float]:
        """Wait for a turn, hold it for the with-block, and give it back whatever happens; yields the seconds spent
        waiting. The options are held_turn's."""
        with self.held_turn(on_wait, **options) as held:
            yield held.waited_s

    @contextmanager
    def held_turn(
        self,
        on_wait: Callable[[int, float], None] | None = None,
        timeout_s: float | None = None,
        poll_s: float = 0.5,
        background: bool = False,
        kind: TurnKind | None = None,
        client: Hashable | None = None,
    ) -> Iterator[HeldTurn]:
        """Wait for a turn (calling on_wait(ahead, waited_s) at most every poll_s while waiting, outside the lock) and
        hold it for the with-block, yielding the HeldTurn: its pass_on() lets a waiting participant go first in the
        middle of a long piece of work (between two chunks of a prefill) and queues again for the rest.
        background=True: wait behind every interactive waiter, present and future. kind: what the turn is for
        (default "background" for a background turn, else "step"). client: the participant's address, for the
        rotation between clients (None: a client of its own).

        Raises QueueTimeout after timeout_s. An exception raised by on_wait (e.g. streamlit stopping the script
        because the user clicked something) leaves the line cleanly."""
        kind = kind or ("background" if background else "step")
        held = HeldTurn(self, background, kind, on_wait, timeout_s, poll_s, client)
        held.waited_s = self._wait(self._enqueue(background, client), background, kind, on_wait, timeout_s, poll_s)
        held.held = True
        try:
            yield held
        finally:
            if held.held:
                self._leave(kind)

    def _enqueue(self, background: bool, client: Hashable | None = None) -> int:
        ticket = next(self._tickets)
        with self._cond:
            self._line_in(ticket, background, client)
        return ticket

    def _line_in(self, ticket: int, background: bool, client: Hashable | None) -> None:
        """Put a ticket at the back of its line (under the lock)."""
        if background:
            self._background.append(ticket)
            return
        self._line.append(ticket)
        if client is not None:
            self._client_of[ticket] = client

    def _wait(self, ticket: int, background: bool, kind: str, on_wait: Callable[[int, float], None] | None, timeout_s: float | None, poll_s: float) -> float:
        """Wait until the ticket (already in its line) is admitted; returns the seconds waited. On a timeout or an
        exception from on_wait the ticket leaves the line and nothing is held."""
        line = self._background if background else self._line
        start = time.monotonic()
        admitted = False
        try:
            while True:
                with self._cond:
                    if self._may_enter(ticket, background):
                        self._admitted(ticket, background)
                        self._in_flight += 1
                        self._kinds[kind] += 1
                        admitted = True
                        break
                    waited = time.monotonic() - start
                    if timeout_s is not None and waited >= timeout_s:
                        raise QueueTimeout(
                            f"Waited {waited:.0f} s for the model ({self._ahead(ticket, background)} ahead) without a turn: "
                            "the server is busy. Try again in a minute."
                        )
                    self._cond.wait(poll_s if timeout_s is None else max(0.0, min(poll_s, timeout_s - waited)))
                    if self._may_enter(ticket, background):
                        continue
                    ahead = self._ahead(ticket, background)
                if on_wait is not None:
                    on_wait(ahead, time.monotonic() - start)
        finally:
            if not admitted:
                with self._cond:
                    if ticket in line:
                        line.remove(ticket)
                    self._client_of.pop(ticket, None)
                    self._cond.notify_all()
        return time.monotonic() - start

    def _leave(self, kind: str) -> None:
        with self._cond:
            self._in_flight -= 1
            self._kinds[kind] -= 1
            self._cond.notify_all()


class HeldTurn:
    """A turn being held (ModelQueue.held_turn). pass_on() hands it to the first interactive waiter, if there is one,
    and waits for a new turn at the back of the same line (the same on_wait and timeout), so a long prefill split into
    chunks lets every Step queued behind it in between two chunks. A QueueTimeout (or an exception from on_wait) while
    waiting to come back leaves nothing held; the with-block then ends with the exception."""

    def __init__(self, queue: ModelQueue, background: bool, kind: str, on_wait, timeout_s: float | None, poll_s: float, client: Hashable | None = None) -> None:
        self.queue, self.background, self.kind, self.client = queue, background, kind, client
        self.on_wait, self.timeout_s, self.poll_s = on_wait, timeout_s, poll_s
        self.held = False
        self.waited_s = 0.0  # before the turn was first admitted
        self.passed = 0  # times the turn was handed on

    def pass_on(self) -> float:
        """Let a waiting participant's turn go first (none waiting: keep the turn); the seconds waited to come back."""
        queue = self.queue
        if not self.held:
            raise RuntimeError("pass_on() needs the turn held")
        with queue._cond:
            if not queue._line:  # nobody interactive is waiting: a background turn yields to them only, as at admission
                return 0.0
            ticket = next(queue._tickets)
            queue._line_in(ticket, self.background, self.client)
            queue._in_flight -= 1
            queue._kinds[self.kind] -= 1
            self.held = False
            self.passed += 1
            queue._cond.notify_all()
        waited = queue._wait(ticket, self.background, self.kind, self.on_wait, self.timeout_s, self.poll_s)
        self.held = True
        return waited


_queues: dict[tuple, ModelQueue] = {}
_queues_lock = threading.Lock()


def model_queue(key: tuple, max_in_flight: int = 1) -> ModelQueue:
    """The one queue for a loaded model (key: what identifies it, e.g. (source, device, dtype)).

    The bound is fixed when the queue is first made; a later call with another bound logs and keeps the first."""
    with _queues_lock:
        queue = _queues.get(key)
        if queue is None:
            queue = _queues[key] = ModelQueue(str(key[0]) if key else "model", max_in_flight)
        elif queue.max_in_flight != max_in_flight:
            log.info("queue for %s keeps max_in_flight=%d (asked %d)", key, queue.max_in_flight, max_in_flight)
        return queue


def turns_in_flight(kind: TurnKind | None = None) -> int:
    """Model turns held right now, over every queue (at exit: is anything still running a model pass?); of one
    kind only when kind is given."""
    with _queues_lock:
        queues = list(_queues.values())
    return sum(q.in_flight if kind is None else q.in_flight_of(kind) for q in queues)


def reset_queues() -> None:
    """Forget every queue (tests)."""
    with _queues_lock:
        _queues.clear()
