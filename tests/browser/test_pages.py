"""Every page renders in a real browser: no exception element, the app title, the sidebar navigation."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.st_browser import PAGES, exceptions, open_page, wait_idle

APP_TITLE = "specviz: speculative decoding, step by step"  # app.py's page_title


def nav_labels(driver) -> list[str]:
    # each link's text is "<icon>\n<title>"
    return [a.text.strip().splitlines()[-1] for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]')]


@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_without_exception(driver, app_url, path):
    open_page(driver, app_url, path)
    assert exceptions(driver) == []
    assert driver.title == APP_TITLE
    assert nav_labels(driver) == list(PAGES.values())
    assert driver.current_url.rstrip("/") == f"{app_url}/{path}".rstrip("/")


def test_sidebar_links_reach_every_page(driver, app_url):
    open_page(driver, app_url)
    for path, title in PAGES.items():
        link = next(a for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]') if a.text.strip().endswith(title))
        link.click()
        WebDriverWait(driver, 30).until(lambda d: d.current_url.rstrip("/") == f"{app_url}/{path}".rstrip("/"))
        wait_idle(driver)
        assert exceptions(driver) == []
