"""In a real browser, on a shared-mode server: a hostile share link and a hostile recording draw no link and no image
that points where their author chose (127.0.0.1:1), and the payload is shown as text. And the server exits within 5 s
of SIGTERM while a participant's Run to end is in the middle of a round."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, main_text, metric_value, open_page, wait, wait_idle
from tests.browser.conftest import run_app
from tests.test_shutdown import EXIT_WITHIN_S, start_server, stop_within
from tests.test_untrusted_markdown import PAYLOAD, SHOWN, hostile_recording

LIVE = 'a[href*="127.0.0.1:1"], img[src*="127.0.0.1:1"], [src*="127.0.0.1:1"], [href*="127.0.0.1:1"]'
# what the payload's ':red[r]' and ':material/home:' would draw (its ':smile:' would be an emoji in the text)
STYLED = '.stMarkdownColoredText, .stMarkdownColoredBackground, [aria-label="home icon"]'


@pytest.fixture(scope="module")
def shared_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with run_app(tmp_path_factory.mktemp("untrusted") / "server.log", env={"SPECVIZ_MODE": "shared"}) as server:
        yield server.url


def live_elements(driver) -> list[str]:
    return [e.get_attribute("outerHTML")[:200] for e in driver.find_elements(By.CSS_SELECTOR, LIVE)]


def shown_text(driver) -> str:
    return main_text(driver).replace("\u2060", "") + driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"]').text.replace("\u2060", "")


def test_a_hostile_share_link_draws_no_link_or_image(driver, shared_url):
    query = {"drafter": PAYLOAD, "target": PAYLOAD, "top_k": PAYLOAD, "prompt": PAYLOAD, f"[Session expired - click to log in](http://127.0.0.1:1/login){PAYLOAD}": "1"}
    open_page(driver, shared_url, "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote))
    wait_idle(driver, 120)
    assert not exceptions(driver)
    assert not live_elements(driver), live_elements(driver)
    assert SHOWN in shown_text(driver), "the link's text is shown, literally"
    assert not [e.text for e in driver.find_elements(By.CSS_SELECTOR, "strong, em") if e.text.strip() in ("import", "em")], "no emphasis from the link"
    assert not driver.find_elements(By.CSS_SELECTOR, STYLED) and "\U0001f604" not in shown_text(driver), "no colour, icon or emoji"


def test_a_hostile_recording_draws_no_link_or_image(driver, shared_url, tmp_path):
    path = tmp_path / "hostile.json"
    path.write_bytes(hostile_recording())
    open_page(driver, shared_url)
    box = wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.st-key-recording input[type="file"]'))[0]
    box.send_keys(str(path))
    wait(driver, 60).until(lambda d: "Replay" in main_text(d) and metric_value(d, "rounds") == "1")
    wait_idle(driver, 60)
    for key in ("step", "run_all"):  # the Round inspector's stories, every run's error, the baseline's error
        assert not live_elements(driver), live_elements(driver)
        before = metric_value(driver, "rounds")
        click_button(driver, key)
        wait(driver, 120).until(lambda d, before=before: metric_value(d, "rounds") not in (None, before))  # the click's rerun drew
        wait_idle(driver, 120)
    assert not exceptions(driver)
    assert not live_elements(driver), live_elements(driver)
    assert SHOWN in shown_text(driver)


@pytest.mark.smollm
def test_the_server_exits_within_5_s_of_sigterm_during_run_to_end(driver, tmp_path: Path):
    proc, url = start_server(tmp_path / "server.log", env={"SPECVIZ_MODE": "shared"})
    try:
        open_page(driver, url, "?max_new_tokens=256")
        click_button(driver, "run_all")
        wait(driver, 120).until(lambda d: (metric_value(d, "rounds") or "0") not in ("0", "–") or "round" in main_text(d))
        time.sleep(2.0)  # mid-run: a round is in flight or about to be
        code, took = stop_within(proc, EXIT_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert code is not None, f"still running {took:.1f} s after SIGTERM:\n{log[-2000:]}"
    assert code == 0, f"exit code {code} after {took:.1f} s:\n{log[-2000:]}"
    print(f"exited {took:.2f} s after SIGTERM, mid Run to end")
