"""The room follows the teacher in real browsers through a real room (`python -m specviz room --replicas 2`, HAProxy):
a presenter and two followers on different replicas (their SERVERID cookies differ); the followers see the
presenter's round and the next one shortly after each Step; one forks and steps; the board shows the fork's point
(saved as assets/screenshot_board.png for docs/workshop.md); the presenter stops and the followers' pages say so."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, main_text, metric_value, set_text, wait, wait_idle
from specviz.ui.common.timing import parse_line
from specviz.workshop.presentation import PresentationStore
from tests.browser.st_browser import save_section_screenshot
from tests.browser.test_room import HAPROXY, SETTINGS, STEP_TIMEOUT_S, open_url, room, step
from tests.test_room_supervisor import wait_or_fail

KEY = "a presenter key for the test"
SCREENSHOT = "screenshot_board.png"  # in assets/ with SPECVIZ_UPDATE_SCREENSHOTS=1 (the screenshot_dir fixture)
REDRAW_TIMEOUT_S = 20  # how long a follower may take to say the presentation stopped
# The target is a follower's redraw within 1 s of each presenter Step (scripts/room_load_test.py --presenter
# measures it under load on a quiet machine). Here three Chromiums, two replicas and the test share a busy 2-core
# machine (load average 4-7), so the bounds have slack, and the two halves are checked apart (both printed):
# - the server's half, what the app controls: the presenter's Step ends -> the follower's replica has sent the redrawn
#   page (the timing lines' clocks): 0.3-1.1 s measured here, asserted <= 2 s;
# - the click to the follower's page showing the round, browsers included (the teacher's browser sending the click,
#   the followers' rendering on the same cores): 2.1-5.4 s measured here, asserted <= 8 s.
SERVER_REDRAW_WITHIN_S = 2.0
REDRAW_WITHIN_S = 8.0
SHOWS = "return Array.from(document.querySelectorAll('[data-testid=\"stAlert\"]')).some(e => e.textContent.includes(arguments[0]))"


def replica(driver) -> str | None:
    cookie = driver.get_cookie("SERVERID")
    return cookie["value"] if cookie else None


def open_expander(driver, title: str) -> None:
    for summary in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stExpander"] summary'):
        if title in summary.text:
            if summary.find_element(By.XPATH, "..").get_attribute("open") is None:
                summary.click()
            return
    raise AssertionError(f"no expander {title!r}")


def following_round(driver) -> str:
    text = main_text(driver)
    at = text.find("Following the presenter (round ")
    return text[at + 31 : text.find(")", at)] if at >= 0 else ""


def redraw_seconds(clicked: float, followers: list, text: str, timeout_s: float = REDRAW_TIMEOUT_S) -> list[float | None]:
    """Seconds from the presenter's click until each follower's page shows `text` (None: not within timeout_s),
    polled side by side every 50 ms with one cheap script per page (not the whole page's text)."""
    seen: dict[int, float] = {}
    while len(seen) < len(followers) and time.monotonic() - clicked < timeout_s:
        for i, f in enumerate(followers):
            if i not in seen and f.execute_script(SHOWS, text):
                seen[i] = time.monotonic() - clicked
        time.sleep(0.05)
    return [seen.get(i) for i in range(len(followers))]


def server_redraws(log_text: str, teacher: str | None = None) -> list[float]:
    """From the room's timing lines: seconds from the end of each presenter Step (a fragment rerun with a round) to
    the end of each other session's first rerun that ends after that Step began (a follower's redraw: its stage
    fragment, which the app's watcher reruns from the server, or its whole page), per follower and Step. A follower's
    redraw starts as soon as the round is saved, so it may end before the presenter's own page has finished drawing
    (a negative value)."""
    lines = []
    for line in log_text.splitlines():
        fields = parse_line(line)
        if fields is not None and line.startswith("[r"):
            lines.append((datetime.strptime(line[5:28], "%Y-%m-%d %H:%M:%S,%f").timestamp(), fields))
    steps = [(at, f) for at, f in lines if f["steps"] >= 1 and f["fragment"] and f["session"] == (teacher or f["session"])]
    teacher = steps[0][1]["session"] if steps else teacher
    out = []
    for i, (end, f) in enumerate(steps):
        start, until = end - float(f["script_s"]), steps[i + 1][0] if i + 1 < len(steps) else float("inf")
        seen = set()
        for at, g in sorted(lines, key=lambda x: x[0]):
            if start < at <= until and g["session"] != teacher and g["session"] not in seen:
                seen.add(g["session"])
                out.append(at - end)
    return out


def follower_on_another_replica(make_driver, url: str, taken: set[str]):
    """A fresh browser through the balancer, until one lands on a replica not in `taken` (HAProxy balances new ones)."""
    for _ in range(6):
        driver = make_driver()
        open_url(driver, url)
        if replica(driver) not in taken:
            return driver
        driver.quit()
    raise AssertionError(f"every new browser landed on {taken}")


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_the_room_follows_forks_and_sees_the_board(make_driver, tmp_path, tiny_dir, screenshot_dir: Path):
    with room(tmp_path, str(tiny_dir["llama"]), SPECVIZ_PRESENTER_KEY=KEY) as (status, log, run_dir):
        url = f"{status['url']}/?{urlencode(SETTINGS)}"
        teacher = make_driver()
        open_url(teacher, url)
        step(teacher, 0)
        step(teacher, 1)
        open_expander(teacher, "Present to the room")
        set_text(teacher, "present_key", KEY)
        click_button(teacher, "present")
        wait(teacher, STEP_TIMEOUT_S).until(lambda d: "You are presenting" in d.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"]').text)
        assert KEY not in teacher.current_url
        assert PresentationStore(run_dir).read().round == 2

        base = status["url"] + "/"
        first = follower_on_another_replica(make_driver, base, set())
        second = follower_on_another_replica(make_driver, base, {replica(first)})
        assert replica(first) != replica(second)  # the two followers are served by different replicas
        for f in (first, second):
            wait(f, STEP_TIMEOUT_S).until(lambda d: following_round(d) == "2")
            assert not f.find_elements(By.CSS_SELECTOR, ".st-key-step button:not([disabled])")  # read-only

        redraws = []
        offset = log.stat().st_size
        for n in (3, 4):  # two presenter Steps: each follower's page at the new round, timed from the click
            clicked = time.monotonic()
            click_button(teacher, "step")
            redraws.append(redraw_seconds(clicked, [first, second], f"Following the presenter (round {n})"))
            wait(teacher, STEP_TIMEOUT_S).until(lambda d, n=n: metric_value(d, "rounds") == str(n))
            wait_idle(teacher, STEP_TIMEOUT_S)
            for f in (first, second):
                wait_idle(f, STEP_TIMEOUT_S)
        server = server_redraws(log.read_bytes()[offset:].decode(errors="replace"))
        print(f"presenter Step click -> follower shows the round, s (per Step, per follower): {redraws}; server's half: {server}")
        assert len(server) == 4 and all(s <= SERVER_REDRAW_WITHIN_S for s in server), server
        assert all(r is not None and r <= REDRAW_WITHIN_S for rs in redraws for r in rs), redraws

        click_button(first, "fork")
        wait(first, STEP_TIMEOUT_S).until(lambda d: "Your own copy of the presenter's run at round 4" in main_text(d))
        wait_idle(first, STEP_TIMEOUT_S)
        step(first, 4)
        assert metric_value(first, "rounds") == "5"

        wait(teacher, STEP_TIMEOUT_S).until(lambda d: "1 fork(s) since the presentation started" in main_text(d))
        wait_idle(teacher, STEP_TIMEOUT_S)
        save_section_screenshot(teacher, "The room board", screenshot_dir / SCREENSHOT)

        open_expander(teacher, "Present to the room")
        click_button(teacher, "stop_present")
        for f in (first, second):
            wait(f, REDRAW_TIMEOUT_S).until(lambda d: "The presenter stopped presenting" in main_text(d))
        wait_or_fail(lambda: PresentationStore(run_dir).read() is None or None, 10, "the presentation file gone", log)
        assert exceptions(teacher) == exceptions(first) == exceptions(second) == []
        assert "Traceback" not in log.read_text(errors="replace")
        assert KEY not in log.read_text(errors="replace")
