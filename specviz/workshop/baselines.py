"""The plain-decoding baselines that time the step-through page's runs: measured in the background, shared.

A Step runs its own round and returns. Plain decoding of the same target, prompt and sampling (what the measured
speedup divides by) catches up in one worker thread that takes *background* turns in the model's queue
(specviz.workshop.queues.ModelQueue), one plain step per turn, so a waiting round always goes first and the baseline's own
timings, measured inside the engine's step(), never include a wait.

The speedup compares two clocks, so both are read under the same conditions: the same loaded model (precision,
device) and the process's torch threads, with nothing else of this process on the cores. The worker steps only while
no rerun of any session is in flight and the browser has had SETTLE_S to draw the last one
(specviz.workshop.foreground), and a step that a rerun overlapped, or that took over 1.5× the median of the steps
just before it (another process had the cores), is thrown away (the decoder restored to its checkpoint, the same
draws kept) and taken again: a baseline timed beside a rerun's drawing measured 1.5–8× slow, and the page's speedup
came out above the tokens per pass. Retaking only ever makes the baseline faster, so the speedup errs low.

Sessions with the same key (target, precision, prompt ids, sampling, seed, length) share one BaselineRun: the
measured tokens and their times (frozen StepRecords), never a KV cache. Finished runs stay in a bounded LRU cache, so
a room on one example prompt measures it once. The decoder (and its KV cache) belongs to the worker's job alone; the
job holds its run by weak reference and only what building the decoder needs (model, config, prompt ids), so when
every session that asked for an unfinished run is gone, the job stops and its decoder is freed.

Plain Python (threading), no streamlit. The worker is a daemon thread, stopped by stop() (and at exit).
"""

from __future__ import annotations

import atexit
import logging
import statistics
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from specviz.core.decoding import SpeculativeDecoder
from specviz.core.protocols import pausable
from specviz.core.records import StepRecord
from specviz.workshop.foreground import Foreground, foreground
from specviz.workshop.queues import ModelQueue

log = logging.getLogger(__name__)

MAX_FINISHED = 256  # finished baselines kept (tokens and times only: a few kB each)
POLL_S = 0.25  # how often a waiting worker checks whether it was stopped
OUTLIER_FACTOR = 1.5  # a plain step this much slower than the median of the last OUTLIER_WINDOW is taken again...
OUTLIER_WINDOW = 8
MAX_RETAKES = 3  # ...at most this often (a machine that is simply slower keeps its times)


@dataclass(eq=False)
class BaselineRun:
    """One plain-decoding run as far as the worker has measured it. Read by any number of sessions (snapshots
    under a lock); written by the worker only."""

    key: tuple
    max_new_tokens: int
    prefill_ms: float | None = None
    error: str | None = None  # plain decoding failed: the runs go on, only the measured speedup is missing
    _records: list[StepRecord] = field(default_factory=list, repr=False)
    _finished: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @property
    def records(self) -> tuple[StepRecord, ...]:
        with self._cond:
            return tuple(self._records)

    @property
    def num_tokens(self) -> int:
        with self._cond:
            return sum(len(r.emitted) for r in self._records)

    @property
    def generated(self) -> list[int]:
        return [t for r in self.records for t in r.emitted]

    @property
    def finished(self) -> bool:
        """EOS or max new tokens reached (or failed): nothing more will be measured."""
        with self._cond:
            return self._finished or self.error is not None

    def covers(self, num_tokens: int) -> bool:
        """True when the measured tokens reach num_tokens (or the run is finished, so extrapolation is all there is)."""
        with self._cond:
            return self._finished or self.error is not None or sum(len(r.emitted) for r in self._records) >= num_tokens

    def wait_for(self, num_tokens: int, timeout_s: float) -> bool:
        """Block until covers(num_tokens) or the timeout (scripts and tests; the page never waits)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._finished or self.error is not None or sum(len(r.emitted) for r in self._records) >= num_tokens, timeout_s)

    # --- the worker's side ------------------------------------------------------------------------------------

    def _started(self, prefill_ms: float) -> None:
        with self._cond:
            self.prefill_ms = prefill_ms
            self._cond.notify_all()

    def _add(self, record: StepRecord, finished: bool) -> None:
        with self._cond:
            self._records.append(record)
            self._finished = finished
            self._cond.notify_all()

    def _fail(self, message: str) -> None:
        with self._cond:
            self.error = message
            self._cond.notify_all()


def _outlier(record: StepRecord, before: tuple[StepRecord, ...]) -> bool:
    """A plain step far slower than the ones just before it: another process had the cores (the next one differs
    from its neighbours by a token of context, not by half)."""
    recent = [r.round_ms for r in before[-OUTLIER_WINDOW:]]
    return len(recent) >= 3 and record.round_ms > OUTLIER_FACTOR * statistics.median(recent)


@dataclass(eq=False)
class _Job:
    run: weakref.ref  # -> BaselineRun; dead once no session holds the run
    make_decoder: Callable[[], SpeculativeDecoder]  # builds the plain decoder (runs the prefill)
    queue: ModelQueue
    decoder: SpeculativeDecoder | None = None
    retakes: int = 0  # times the step now due was thrown away as disturbed


class _Stopped(Exception):
    pass


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, ValueError):
        return str(exc)
    return f"plain decoding failed ({type(exc).__name__}: {exc})"


class BaselineWorker:
    """The cache of baselines and the one thread that measures them, one job at a time, first come first served."""

    def __init__(self, max_finished: int = MAX_FINISHED, busy: Foreground | None = None) -> None:
        self.max_finished = max_finished
        self.busy = busy if busy is not None else foreground()  # whose reruns the worker yields to
        self.disturbed = 0  # plain steps thrown away because a rerun overlapped them (taken again)
        self._cond = threading.Condition()
        self._finished: OrderedDict[tuple, BaselineRun] = OrderedDict()  # LRU, strong references
        self._pending: weakref.WeakValueDictionary[tuple, BaselineRun] = weakref.WeakValueDictionary()
        self._jobs: deque[_Job] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0  # baselines started since the worker was made (two sessions, one key: one)

    def request(self, key: tuple, make_decoder: Callable[[], SpeculativeDecoder], queue: ModelQueue, max_new_tokens: int) -> BaselineRun:
        """The baseline for key: the finished or pending one if any (and not failed), else a new job. Never blocks on
        the model. make_decoder must not hold a session's objects (the job outlives nothing but its run)."""
        with self._cond:
            run = self._finished.get(key)
            if run is not None and run.error is None:
                self._finished.move_to_end(key)
                return run
            run = self._pending.get(key)
            if run is not None and run.error is None:
                return run
            self._finished.pop(key, None)
            run = BaselineRun(key, max_new_tokens)
            self._pending[key] = run
            self._jobs.append(_Job(weakref.ref(run), make_decoder, queue))
            self.started += 1
            self._start_thread()
            self._cond.notify_all()
        return run

    def __len__(self) -> int:
        with self._cond:
            return len(self._finished) + len(self._pending)

    @property
    def jobs(self) -> int:
        with self._cond:
            return len(self._jobs)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (within about POLL_S plus one plain step) and drop every job."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        with self._cond:
            self._jobs.clear()

    def _start_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="specviz-baselines", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while self._jobs and self._jobs[0].run() is None:  # every session that wanted it is gone
                    self._jobs.popleft()
                if not self._jobs:
                    self._cond.wait(POLL_S)
                    continue
                job = self._jobs[0]
            try:
                done = self._advance(job)
            except _Stopped:
                return
            except Exception:  # the worker must never die
                log.exception("baseline worker")
                done = True
            if done:
                with self._cond:
                    if self._jobs and self._jobs[0] is job:
                        self._jobs.popleft()

    def _check_stop(self, ahead: int = 0, waited_s: float = 0.0) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _advance(self, job: _Job) -> bool:
        """One background turn, taken while no rerun is in flight: the prefill or one plain step (taken again later
        if a rerun overlapped it). True when the job is over (finished, failed, orphaned)."""
        run = job.run()
        if run is None:
            return True
        try:
            mark = self.busy.wait_idle(self._check_stop, POLL_S)
            with job.queue.held_turn(on_wait=self._check_stop, poll_s=POLL_S, background=True) as held:
                if job.decoder is None:
                    with pausable(held.pass_on):  # a long prompt's prefill lets every waiting round go first between chunks
                        job.decoder = job.make_decoder()
                    run._started(job.decoder.prefill_ms)
                    return job.decoder.done and self._finish(run)
                if self.busy.disturbed(mark):  # a rerun started while this waited for the turn
                    return False
                checkpoint = job.decoder.state()
                record = job.decoder.step()
                retake = self.busy.disturbed(mark) or (job.retakes < MAX_RETAKES and _outlier(record, run.records))
                if retake:
                    job.decoder.restore(checkpoint)
                    job.retakes += 1
                    self.disturbed += 1
                    log.debug("baseline step disturbed (%.1f ms): taken again", record.round_ms)
                    return False
            job.retakes = 0
            run._add(record, job.decoder.done)
        except _Stopped:
            raise
        except Exception as exc:  # the runs stay usable; only the measured speedup goes missing
            log.warning("baseline %s failed: %s", run.key[:1], exc, exc_info=not isinstance(exc, ValueError))
            run._fail(failure_message(exc))
            return True
        return job.decoder.done and self._finish(run)

    def _finish(self, run: BaselineRun) -> bool:
        with self._cond:
            self._pending.pop(run.key, None)
            self._finished[run.key] = run
            while len(self._finished) > self.max_finished:
                self._finished.popitem(last=False)
        return True


_worker: BaselineWorker | None = None
_worker_lock = threading.Lock()


def baseline_worker() -> BaselineWorker:
    """The process's one worker (and cache), made on first use."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = BaselineWorker()
        return _worker


def reset_baselines() -> None:
    """Stop the worker and forget every baseline (tests)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None:
        worker.stop()


@atexit.register
def _stop_at_exit() -> None:
    """Let a plain step in flight finish before the interpreter goes (a daemon thread inside torch at finalisation
    aborts the process); on a quiet machine that is one step, tens of milliseconds."""
    if _worker is not None:
        _worker.stop(timeout_s=3.0)
