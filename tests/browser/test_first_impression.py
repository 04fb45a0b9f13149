"""The step-through page's first impression (issue 43), in a real browser on a laptop and on a phone: after each of
the first Steps the newest generated token is in view without scrolling, and the default run speculates from the
first Step (it drafts, keeps at least one draft, and so commits more than one token per target pass)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import exceptions, metric_value, open_page, wait, wait_idle

STEP_TIMEOUT_S = 180  # the first round of a fresh server loads SmolLM2
GENERATED = '.specviz-stream span[title]:not([title="prompt"])'  # every generated / drafted token carries a hover title
SCREENS = {"laptop": (1366, 768, False), "phone": (390, 844, True)}  # width, height, mobile (touch)


def emulate(driver, width: int, height: int, mobile: bool) -> None:
    """The viewport of a laptop or a phone (Chromium's device emulation: exact CSS pixels, touch on a phone)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": mobile, "maxTouchPoints": 5 if mobile else 1})


def press(driver, key: str) -> None:
    """Press a keyed button as a tap would: a DOM click, no scrolling (under Chromium's phone emulation a WebDriver
    click misses the emulated viewport and reports the button not interactable)."""
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, f".st-key-{key} button:not([disabled])"))
    driver.execute_script("arguments[0].click();", driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button"))


def newest_token_box(driver) -> dict:
    """The newest generated token's box in the viewport (getBoundingClientRect) and the window's height and scroll."""
    return driver.execute_script(
        "const t = document.querySelectorAll(arguments[0]); const last = t[t.length - 1], first = t[0];"
        "const r = last.getBoundingClientRect();"
        "return {top: r.top, bottom: r.bottom, first_y: first.getBoundingClientRect().top + window.scrollY,"
        " height: window.innerHeight, scroll: window.scrollY, count: t.length};",
        GENERATED,
    )


@pytest.fixture
def screen_driver(make_driver, request):
    width, height, mobile = SCREENS[request.param]
    driver = make_driver()
    emulate(driver, width, height, mobile)
    return driver  # make_driver quits it at the end of the session


@pytest.mark.parametrize("screen_driver", list(SCREENS), indirect=True)
def test_each_step_shows_its_newest_token_without_scrolling(screen_driver, app_url, request):
    driver = screen_driver
    open_page(driver, app_url)
    for n in range(3):
        press(driver, "step")
        wait(driver, STEP_TIMEOUT_S).until(lambda d, want=str(n + 1): metric_value(d, "rounds") == want)
        wait_idle(driver, STEP_TIMEOUT_S)
        box = newest_token_box(driver)
        if n == 0:
            per_pass = metric_value(driver, "tokens / target pass")
            print(f"{request.node.callspec.id}: first generated token at y = {box['first_y']:.0f} px; first Step: {per_pass} tokens per target pass")
            assert float(per_pass) > 1, f"the first Step did not speculate: {per_pass} tokens per target pass"
        assert box["scroll"] == 0, box
        assert 0 <= box["top"] and box["bottom"] <= box["height"], f"after Step {n + 1} the newest token is out of view: {box}"
    assert exceptions(driver) == []


def test_the_phone_layout_is_compact(make_driver, app_url):
    """On a phone the control buttons share one row and the metrics sit in a grid, not one per row."""
    driver = make_driver()
    emulate(driver, *SCREENS["phone"])
    if True:
        open_page(driver, app_url)
        press(driver, "step")
        wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "1")
        wait_idle(driver, STEP_TIMEOUT_S)
        tops = {key: driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button").rect["y"] for key in ("step", "run_all", "play", "reset")}
        assert max(tops.values()) - min(tops.values()) < 10, f"the controls are not one row: {tops}"
        metric_rows = {round(m.rect["y"]) for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')}
        metrics = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')
        assert len(metric_rows) < len(metrics), f"{len(metrics)} metrics in {len(metric_rows)} rows"
        assert driver.find_elements(By.CSS_SELECTOR, ".modebar-container .modebar") == [], "plotly's mode bar is drawn"
