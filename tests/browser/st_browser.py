"""Selenium helpers for a Streamlit app: wait for reruns, press keyed widgets, read the page."""

from __future__ import annotations

import time

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

PAGES = {"": "Step through", "theory": "Speedup theory", "exactness": "Exactness lab", "numerics": "Numerics lab", "benchmark": "Benchmark", "race": "Two services"}
APP = '[data-testid="stApp"]'
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'
EXCEPTION = '[data-testid="stException"]'


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


def save_screenshot(driver: WebDriver, path) -> None:
    """Scroll to the top, park the mouse on the caption (no tooltip, no hover styles), wait for idle, save."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("window.scrollTo(0, 0); document.activeElement && document.activeElement.blur();")
    captions = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] [data-testid="stCaptionContainer"]')
    if captions:
        ActionChains(driver).move_to_element(captions[0]).perform()
    wait_idle(driver)
    time.sleep(0.5)  # tooltips and plotly transitions fade out
    if not driver.save_screenshot(str(path)):
        raise RuntimeError(f"could not write {path}")


def save_section_screenshot(driver: WebDriver, heading: str, path) -> None:
    """Scroll the first heading whose text contains `heading` to the top of the window, wait for idle, save."""
    found = [h for h in driver.find_elements(By.CSS_SELECTOR, "h1, h2, h3") if heading in h.text]
    if not found:
        raise AssertionError(f"no heading containing {heading!r} on the page")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'}); document.activeElement && document.activeElement.blur();", found[0])
    wait_idle(driver)
    time.sleep(0.5)
    if not driver.save_screenshot(str(path)):
        raise RuntimeError(f"could not write {path}")


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
