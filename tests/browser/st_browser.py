"""What only the browser tests need: the app's pages by URL path, and screenshots for the README (assets/). The
waits, the driver and the page readers are the load-testing package's (specviz.loadtest.browser)."""

from __future__ import annotations

import time

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from specviz.loadtest.browser import wait_idle

PAGES = {"": "Step through", "theory": "Speedup theory", "exactness": "Exactness lab", "numerics": "Numerics lab", "benchmark": "Benchmark", "race": "Two services"}


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
