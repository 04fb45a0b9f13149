"""Headless Chromium against a Streamlit app: the driver, waits for reruns, keyed widgets pressed, the page read.

The browser tests (tests/browser/) and the browser scripts (load_test.py's browser client, step_latency.py,
theory_latency.py, speedup_check.py, contention.py) share these waits. Needs selenium (requirements-dev.txt) and
Debian's chromium and chromium-driver."""

from __future__ import annotations

import os
import time

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

APP = '[data-testid="stApp"]'
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'
EXCEPTION = '[data-testid="stException"]'


def new_driver(window_size: str = "1400,1600"):
    """Headless Debian Chromium through its chromedriver (SPECVIZ_CHROMIUM / SPECVIZ_CHROMEDRIVER override the paths)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("SPECVIZ_CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage", f"--window-size={window_size}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(os.environ.get("SPECVIZ_CHROMEDRIVER", "/usr/bin/chromedriver")), options=options)
    driver.set_page_load_timeout(180)
    return driver


def wait(driver: WebDriver, timeout: float = 60) -> WebDriverWait:
    """WebDriverWait that retries when a rerun replaces an element mid-check (stale references)."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))


def wait_idle(driver: WebDriver, timeout: float = 60, settle: float = 0.3) -> None:
    """Wait until the script has finished its run and stayed idle for `settle` seconds (reruns are async)."""
    deadline = time.monotonic() + timeout
    idle_since = None
    while time.monotonic() < deadline:
        if driver.find_elements(By.CSS_SELECTOR, IDLE):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= settle:
                return
        else:
            idle_since = None
        time.sleep(0.1)
    state = [e.get_attribute("data-test-script-state") for e in driver.find_elements(By.CSS_SELECTOR, APP)]
    raise TimeoutException(f"the app did not finish its run within {timeout}s (script state {state})")


def open_page(driver: WebDriver, base_url: str, path: str = "", timeout: float = 180) -> None:
    driver.get(f"{base_url}/{path}")
    wait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, APP))
    # the first element of the page proves the script ran at least once
    wait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stMainBlockContainer"] [data-testid="stElementContainer"]'))
    wait_idle(driver, timeout)


def exceptions(driver: WebDriver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, EXCEPTION)]


def keyed(driver: WebDriver, key: str):
    """The element container streamlit tags with `st-key-<key>` for a widget created with key=..."""
    return driver.find_element(By.CSS_SELECTOR, f".st-key-{key}")


def click_button(driver: WebDriver, key: str, timeout: float = 30) -> None:
    wait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, f".st-key-{key} button:not([disabled])"))
    for _ in range(3):  # a rerun may replace the node between find and click
        try:
            driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button").click()
            return
        except StaleElementReferenceException:
            time.sleep(0.2)
    driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button").click()


def set_text(driver: WebDriver, key: str, text: str) -> None:
    """Replace a text area / text input's value and commit it (streamlit commits on blur)."""
    selector = f".st-key-{key} textarea, .st-key-{key} input"
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    box = driver.find_element(By.CSS_SELECTOR, selector)
    driver.execute_script(
        "const el = arguments[0];"
        "const proto = el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;"
        "Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, arguments[1]);"
        "el.dispatchEvent(new Event('input', {bubbles: true}));",
        box,
        text,
    )
    # focus + blur from script: a click can hit an element still sliding in (an expander opening on a busy machine)
    driver.execute_script("arguments[0].focus(); arguments[0].blur();", box)


def main_text(driver: WebDriver) -> str:
    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text


def metric_value(driver: WebDriver, label: str) -> str | None:
    """The value of the st.metric whose label is `label` (the first one), or None."""
    for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
        try:
            if m.find_element(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]').text.strip() == label:
                return m.find_element(By.CSS_SELECTOR, '[data-testid="stMetricValue"]').text.strip()
        except StaleElementReferenceException:
            return None
    return None


def nudge_slider(driver: WebDriver, key: str, steps: int) -> None:
    """Move a slider by `steps` of its step size with the arrow keys (negative: to the left)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    thumb = driver.find_element(By.CSS_SELECTOR, f'.st-key-{key} input[type="range"]')  # react-aria's hidden input
    driver.execute_script("arguments[0].focus();", thumb)
    key_name = Keys.ARROW_RIGHT if steps > 0 else Keys.ARROW_LEFT
    ActionChains(driver).send_keys(key_name * abs(steps)).perform()


def slider_to_end(driver: WebDriver, key: str) -> None:
    """Move a slider to its maximum with one key press (one rerun)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    thumb = driver.find_element(By.CSS_SELECTOR, f'.st-key-{key} input[type="range"]')
    driver.execute_script("arguments[0].focus();", thumb)
    ActionChains(driver).send_keys(Keys.END).perform()


def slider_value(driver: WebDriver, key: str) -> str:
    """The value the slider shows, as its label prints it (e.g. '0.80')."""
    return driver.find_element(By.CSS_SELECTOR, f'.st-key-{key} input[type="range"]').get_attribute("aria-valuetext")


def stream_text(driver: WebDriver) -> str:
    """The token stream as the reader sees it (prompt, kept and thrown-away tokens, whitespace marks)."""
    streams = driver.find_elements(By.CSS_SELECTOR, ".specviz-stream")
    return "\n".join(s.get_attribute("innerText") for s in streams)


SPEEDUP_LABELS = ("speedup", "speedup (wall clock)")  # the step-through page's measured speedup metric


def speedup_shown(driver: WebDriver) -> str | None:
    """The step-through page's measured speedup as shown ("3.41×", "measuring…", "disturbed"), or None."""
    return next((v for label in SPEEDUP_LABELS if (v := metric_value(driver, label)) is not None), None)


def wait_for_baseline(driver: WebDriver, timeout_s: float = 180.0, pause_s: float = 2.0) -> str:
    """Until the speedup is no longer "measuring…" (the baseline is timed in the background and the page draws
    it on its next rerun): pause, then rerun the page by switching the inspector's follow toggle off and on (no
    model time). Returns the speedup shown."""
    deadline = time.monotonic() + timeout_s
    while (shown := speedup_shown(driver)) in ("measuring…", None, ""):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the baseline did not catch up within {timeout_s:.0f} s")
        time.sleep(pause_s)
        for _ in range(2):
            driver.find_element(By.CSS_SELECTOR, ".st-key-inspect_follow label").click()
            wait_idle(driver, 60, settle=0.3)
    return shown


def choose(driver: WebDriver, key: str, label: str) -> None:
    """Pick `label` in the selectbox with this key: open its list, click the option (a react-aria combobox)."""
    field = f".st-key-{key} input[role='combobox']"
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, field))
    if driver.find_element(By.CSS_SELECTOR, field).get_attribute("value") == label:
        return
    driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button[aria-haspopup='listbox']").click()
    option = f"//*[@role='option'][normalize-space()={label!r}]"
    wait(driver, 30).until(lambda d: d.find_elements(By.XPATH, option))
    driver.find_element(By.XPATH, option).click()
    wait(driver, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, field).get_attribute("value") == label)


OBSERVE_JS = """
const app = document.querySelector('[data-testid="stApp"]');
window.__specviz_t = {click: null, running: null, idle: null};
if (!window.__specviz_obs) {
  window.__specviz_obs = new MutationObserver(() => {
    const t = window.__specviz_t, s = app.getAttribute('data-test-script-state');
    if (t.click === null) return;
    if (s === 'running' && t.running === null) t.running = performance.now();
    if (s === 'notRunning' && t.running !== null && t.idle === null) t.idle = performance.now();
  });
  window.__specviz_obs.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
}
const button = document.querySelector('.st-key-step button');
window.__specviz_t.click = performance.now();
button.click();
"""


def timed_step(driver: WebDriver, rounds_before: int, timeout_s: float = 300) -> float:
    """Click Step in the page; seconds from the click until the script is idle with one more round shown (both
    instants read in the page: the click, and the script state back to notRunning from a MutationObserver)."""
    driver.execute_script(OBSERVE_JS)
    deadline = time.monotonic() + timeout_s
    while metric_value(driver, "rounds") != str(rounds_before + 1):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no round {rounds_before + 1} after {timeout_s:.0f} s")
        time.sleep(0.05)
    wait_idle(driver, timeout_s, settle=0.3)
    t = driver.execute_script("return window.__specviz_t")
    if not t or t.get("idle") is None or t.get("click") is None:
        raise RuntimeError(f"the page's script state was not observed going running -> notRunning: {t}")
    return (t["idle"] - t["click"]) / 1000.0
