"""The 45-minute lesson: the task table and the doc agree, every task's page draws its checklist, the room's counting
store (one mark per session per task, unticking takes it back, bounded, hostile files read as empty, gone with the
presentation; on both backends of the room's store: tests/store_helpers.py), ticking a task in the app (AppTest on
the theory page, shared mode, a live presentation), and the board's counts."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.ui.common.navigation import PAGE_SPECS
from specviz.workshop import lesson
from specviz.workshop.lesson import TASKS, LessonMarks, marks_name, session_digest
from specviz.workshop.presentation import PresentationStore
from tests.test_app_saved_runs import room_env, room_runs  # noqa: F401  (fixtures: shared mode, the room's store on each backend)
from tests.test_app_shared import PAGES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "lesson-45min.md"


def digest() -> str:
    return session_digest(secrets.token_urlsafe(16))


def live_presentation(root) -> str:
    presentation, _ = PresentationStore(root).start(secrets.token_urlsafe(16), 1)
    return presentation.id


def marks_of(marks: LessonMarks, pid: str) -> bytes | None:
    return marks.store.get(marks_name(pid), 10 * lesson.MAX_FILE_BYTES)


# --- one table, one doc ----------------------------------------------------------------------------------------


def doc_tasks(text: str) -> list[tuple[int, str, str, int, list[str]]]:
    """Each "### Task N of M: title (page, m min)" heading of the doc with the "- [ ] " steps under it."""
    heads = list(re.finditer(r"^### Task (\d+) of (\d+): (.+) \((.+), (\d+) min\)$", text, flags=re.M))
    out = []
    for i, h in enumerate(heads):
        body = text[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)].split("\n## ")[0]
        assert int(h.group(2)) == len(TASKS)
        out.append((int(h.group(1)), h.group(3), h.group(4), int(h.group(5)), re.findall(r"^- \[ \] (.+)$", body, flags=re.M)))
    return out


def test_the_docs_tasks_are_the_apps_table():
    """The doc and the app must not drift: the doc's task headings (title, page, minutes) and checklists, in order,
    are TASKS."""
    titles = {spec.path: spec.title for spec in PAGE_SPECS}
    expected = [(t.number, t.title, titles[t.page], t.minutes, list(t.steps)) for t in TASKS]
    assert doc_tasks(DOC.read_text(encoding="utf-8")) == expected
    assert [t.number for t in TASKS] == list(range(1, len(TASKS) + 1)) and sum(t.minutes for t in TASKS) <= 45


def test_the_drift_check_sees_a_changed_step():
    """Known-bad control: a doc whose step differs from the table's by one word is caught."""
    text = DOC.read_text(encoding="utf-8")
    changed = text.replace(TASKS[2].steps[1], TASKS[2].steps[1].replace("too often", "too rarely"))
    assert changed != text and doc_tasks(changed) != doc_tasks(text)


def test_every_task_belongs_to_a_page_that_draws_its_checklist():
    pages = {spec.path for spec in PAGE_SPECS}
    for task in TASKS:
        assert task.page in pages and task.steps
        assert "checklist(__file__)" in (ROOT / task.page).read_text(encoding="utf-8"), task.page


# --- the counting store ------------------------------------------------------------------------------------------


def test_one_mark_per_session_per_task_and_unticking_takes_it_back(room_store):
    marks, pid = LessonMarks(room_store), live_presentation(room_store)
    alice, bob = digest(), digest()
    for _ in range(5):  # the same session again and again: still one
        assert marks.record(pid, alice, {1, 2})
    assert marks.counts(pid) == {1: 1, 2: 1, 3: 0, 4: 0, 5: 0}
    marks.record(pid, bob, {1})
    assert marks.counts(pid)[1] == 2
    marks.record(pid, alice, {2, 3})  # alice unticked task 1
    assert marks.counts(pid) == {1: 1, 2: 1, 3: 1, 4: 0, 5: 0}
    assert alice.encode() in marks_of(marks, pid) and b"secret" not in marks_of(marks, pid)


def test_what_a_session_can_write_is_checked(room_store):
    marks, pid = LessonMarks(room_store), live_presentation(room_store)
    with pytest.raises(ValueError):
        marks.record(pid, "not a digest", {1})
    with pytest.raises(ValueError):
        marks.record(pid, digest(), {99})
    with pytest.raises(ValueError):
        marks.record("../../etc/passwd", digest(), {1})


def test_the_marks_are_bounded_however_many_sessions_come(room_store, monkeypatch):
    monkeypatch.setattr(lesson, "MAX_MARKS_PER_TASK", 3)
    marks, pid = LessonMarks(room_store), live_presentation(room_store)
    fitted = [marks.record(pid, digest(), {1, 2, 3, 4, 5}) for _ in range(10)]
    assert fitted == [True] * 3 + [False] * 7
    assert set(marks.counts(pid).values()) == {3}
    size = len(marks_of(marks, pid))
    marks.record(pid, digest(), {1})
    assert len(marks_of(marks, pid)) == size  # nothing grew


def test_a_full_file_fits_the_read_limit():
    full = {str(t.number): sorted(f"{i:016x}" for i in range(lesson.MAX_MARKS_PER_TASK)) for t in TASKS}
    data = json.dumps(full, separators=(",", ":")).encode()
    assert len(data) <= lesson.MAX_FILE_BYTES
    assert {n: len(v) for n, v in lesson._parse(data).items()} == dict.fromkeys(range(1, len(TASKS) + 1), lesson.MAX_MARKS_PER_TASK)


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not json",
        b"[1, 2, 3]",
        b'{"1": ["0123456789abcdef"], "9": []}',  # a task that does not exist
        b'{"1": ["0123456789ABCDEF"]}',  # not one of ours
        b'{"1": "0123456789abcdef"}',
        b'{"1": [' + b",".join([b'"0123456789abcdef"'] * 1001) + b"]}",  # more than a task holds
        b"[" * 100_000,
        b'{"1": []}' + b" " * (lesson.MAX_FILE_BYTES + 1),  # too large
    ],
)
def test_a_damaged_or_hostile_file_reads_as_empty_and_is_replaced(room_store, content, caplog):
    marks, pid = LessonMarks(room_store), live_presentation(room_store)
    marks.store.put(marks_name(pid), content)
    assert set(marks.counts(pid).values()) == {0}
    assert "damaged" in caplog.text or "too large" in caplog.text
    marks.record(pid, digest(), {4})
    assert marks.counts(pid)[4] == 1 and len(marks_of(marks, pid)) < 100


def test_the_marks_go_with_the_presentation(room_store):
    room = PresentationStore(room_store)
    first, _ = room.start(secrets.token_urlsafe(16), 1)
    LessonMarks(room_store).record(first.id, digest(), {1})
    second, _ = room.start(secrets.token_urlsafe(16), 1, new_board=True)  # a new board: the old marks go
    assert marks_of(LessonMarks(room_store), first.id) is None
    LessonMarks(room_store).record(second.id, digest(), {1})
    assert room.stop(second.id)
    assert marks_of(LessonMarks(room_store), second.id) is None


# --- in the app ---------------------------------------------------------------------------------------------------


def theory_page() -> AppTest:
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tick_task(at: AppTest, number: int, steps: range | None = None) -> AppTest:
    task = TASKS[number - 1]
    for index in steps if steps is not None else range(len(task.steps)):
        at.checkbox(key=f"lesson_task{number}_step{index}").check().run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def test_ticking_a_task_counts_the_session_once_and_unticking_takes_it_back(room_runs):  # noqa: F811
    room = room_runs.store
    pid = live_presentation(room)
    at = theory_page()
    assert any(e.label.startswith("📋 Lesson task 2 of 5: Predict a speedup") for e in at.expander)
    tick_task(at, 2, range(len(TASKS[1].steps) - 1))
    assert LessonMarks(room).counts(pid)[2] == 0  # not every step yet
    tick_task(at, 2, range(len(TASKS[1].steps) - 1, len(TASKS[1].steps)))
    assert LessonMarks(room).counts(pid)[2] == 1
    assert any("The room board counts you" in c.value for c in at.caption)
    for _ in range(3):  # reruns, and the same ticks sent again, never count twice
        at.run()
        tick_task(at, 2)
    assert LessonMarks(room).counts(pid) == {1: 0, 2: 1, 3: 0, 4: 0, 5: 0}
    other = tick_task(theory_page(), 2)  # another session counts once more
    assert LessonMarks(room).counts(pid)[2] == 2
    other.checkbox(key="lesson_task2_step0").uncheck().run()
    assert LessonMarks(room).counts(pid)[2] == 1


def test_ticks_made_before_the_presentation_count_once_it_starts(room_runs):  # noqa: F811
    room = room_runs.store
    at = tick_task(theory_page(), 2)
    assert not room.entries("lesson-", ".marks")  # no presentation: nothing written
    pid = live_presentation(room)
    at.run()
    assert LessonMarks(room).counts(pid)[2] == 1


def _board_script(presentation_id: str) -> None:
    from specviz.ui.room import board

    board._board(presentation_id)


def test_the_board_shows_how_many_finished_each_task(room_runs):  # noqa: F811
    room = room_runs.store
    pid = live_presentation(room)
    at = AppTest.from_function(_board_script, args=(pid,), default_timeout=60).run()
    assert not at.exception and any("nobody has ticked every step" in c.value for c in at.caption)
    marks = LessonMarks(room)
    for finished in ({1, 2}, {1}, {1, 3}):
        marks.record(pid, digest(), finished)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    assert shown == {"task 1": "3", "task 2": "1", "task 3": "1", "task 4": "0", "task 5": "0"}


def test_a_task_finished_while_the_rooms_store_is_away_is_counted_when_it_is_back(redis_server, room_env, monkeypatch):  # noqa: F811
    """Redis goes away during the lesson: the page says the board could not count the task yet (it does not fail),
    the ticks stay in the session, and the page's next run after Redis is back writes them."""
    from specviz.workshop.store import open_store

    monkeypatch.setenv("SPECVIZ_STORE", redis_server.url)
    pid = live_presentation(open_store())
    at = theory_page()
    redis_server.stop()
    tick_task(at, 2)
    assert any("could not count this yet" in c.value and "unreachable" in c.value for c in at.caption)
    redis_server.start()
    at.run()
    assert not at.exception and LessonMarks(open_store()).counts(pid)[2] == 1
