"""The race page in a real browser: a race on the embedded model (16 tokens), then the playback plays in the browser,
each lane's last token appearing at about the time it was measured (1x), and four times later at a quarter speed.
The tolerances are wide: the browser draws on animation frames, and this machine may be busy."""

from __future__ import annotations

import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from specviz.loadtest.browser import click_button, exceptions, open_page, set_text, wait, wait_idle
from tests.browser.st_browser import save_screenshot

PROMPT = "Repeat exactly: the cat sat on the mat and the dog sat on the log."
TOKENS = 16


def lanes(driver) -> list[dict]:
    return [
        {"kind": e.get_attribute("data-kind"), "shown": int(e.get_attribute("data-shown")), "tokens": int(e.get_attribute("data-tokens")),
         "done_ms": e.get_attribute("data-done-ms"),
         "measured_s": float(e.get_attribute("data-measured-s"))}
        for e in driver.find_elements(By.CSS_SELECTOR, ".lane")
    ]  # fmt: skip


def played(driver, timeout_s: float) -> list[dict]:
    wait(driver, timeout_s).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "done")
    return lanes(driver)


def close_to(done_ms: str | None, expected_s: float) -> bool:
    return done_ms is not None and abs(float(done_ms) / 1000 - expected_s) <= 0.25 * expected_s + 0.5


def test_the_race_plays_back_at_the_measured_speed(driver, app_url, screenshot_dir):
    open_page(driver, app_url, "race")
    set_text(driver, "prompt", PROMPT)
    wait_idle(driver)
    set_text(driver, "max_new_tokens", str(TOKENS))
    wait_idle(driver)
    click_button(driver, "race_start")
    wait(driver, 600).until(lambda d: d.find_elements(By.CSS_SELECTOR, 'iframe[title="The race played back: both lanes on one clock"]'))
    wait_idle(driver, 120)
    assert exceptions(driver) == []
    assert "Identical text" in driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    frame = driver.find_element(By.CSS_SELECTOR, 'iframe[title="The race played back: both lanes on one clock"]')
    driver.switch_to.frame(frame)
    try:
        auto = played(driver, 120)  # it plays by itself once on screen (the page may still be busy: no timing asserted)
        assert all(lane["shown"] == lane["tokens"] for lane in auto)
        driver.find_element(By.ID, "restart").click()  # a click: the page is quiet now
        time.sleep(0.2)
        first = played(driver, 120)
        assert [lane["kind"] for lane in first] == ["plain", "speculative"]
        for lane in first:
            assert lane["shown"] == lane["tokens"] and 8 <= lane["tokens"] <= TOKENS  # all of it (the answer may end early)
            assert close_to(lane["done_ms"], lane["measured_s"]), lane
        Select(driver.find_element(By.ID, "speed")).select_by_value("0.25")
        driver.find_element(By.ID, "restart").click()
        time.sleep(0.2)
        slow = played(driver, 300)
        for lane in slow:
            assert close_to(lane["done_ms"], 4 * lane["measured_s"]), lane
        assert driver.find_elements(By.CSS_SELECTOR, ".speculative .text span")  # the text is there, as text
    finally:
        driver.switch_to.default_content()
    save_screenshot(driver, screenshot_dir / "screenshot_race.png")
