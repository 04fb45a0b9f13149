"""Selenium helpers for a Streamlit app: wait for reruns, press keyed widgets, read the page."""

from __future__ import annotations

import time

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

PAGES = {"": "Step through", "theory": "Speedup theory", "exactness": "Exactness lab", "benchmark": "Benchmark"}
APP = '[data-testid="stApp"]'
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'
EXCEPTION = '[data-testid="stException"]'


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


def open_page(driver: WebDriver, base_url: str, path: str = "", timeout: float = 60) -> None:
    driver.get(f"{base_url}/{path}")
    WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, APP))
    # the first element of the page proves the script ran at least once
    WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stMainBlockContainer"] [data-testid="stElementContainer"]'))
    wait_idle(driver, timeout)


def exceptions(driver: WebDriver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, EXCEPTION)]


def keyed(driver: WebDriver, key: str):
    """The element container streamlit tags with `st-key-<key>` for a widget created with key=..."""
    return driver.find_element(By.CSS_SELECTOR, f".st-key-{key}")


def click_button(driver: WebDriver, key: str, timeout: float = 30) -> None:
    WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, f".st-key-{key} button:not([disabled])"))
    for _ in range(3):  # a rerun may replace the node between find and click
        try:
            driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button").click()
            return
        except StaleElementReferenceException:
            time.sleep(0.2)
    driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button").click()


def set_text(driver: WebDriver, key: str, text: str) -> None:
    """Replace a text area / text input's value and commit it (streamlit commits on blur)."""
    box = driver.find_element(By.CSS_SELECTOR, f".st-key-{key} textarea, .st-key-{key} input")
    driver.execute_script(
        "const el = arguments[0];"
        "const proto = el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;"
        "Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, arguments[1]);"
        "el.dispatchEvent(new Event('input', {bubbles: true}));",
        box,
        text,
    )
    box.click()
    driver.execute_script("arguments[0].blur();", box)


def main_text(driver: WebDriver) -> str:
    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
