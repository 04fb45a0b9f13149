"""Every page's URL is a proper entry point: opened as the FIRST request of a freshly started server, the sidebar
lists the four named pages (not the raw files of pages/), and a share link restores its settings.

Each entry-point case starts its own `streamlit run app.py` (the session server in conftest.py has usually seen
"/" first, which hides the bug: Streamlit's legacy pages/ routing stays on until some session runs st.navigation)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import exceptions, open_page, slider_value, wait
from tests.browser.conftest import run_app
from tests.browser.st_browser import PAGES

APP_TITLE = "specviz: speculative decoding, step by step"


def nav_labels(driver) -> list[str]:
    return [a.text.strip().splitlines()[-1] for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]')]


@pytest.fixture()
def fresh_server(tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Start a brand-new `streamlit run app.py` on a free port (no session has run yet); stopped after the test."""
    numbers = itertools.count()
    with contextlib.ExitStack() as servers:
        yield lambda: servers.enter_context(run_app(tmp_path / f"server-{next(numbers)}.log")).url


@pytest.mark.parametrize("path", list(PAGES))
def test_page_url_is_an_entry_point_of_a_fresh_server(driver, fresh_server, path):
    url = fresh_server()
    open_page(driver, url, path)
    wait(driver, 60).until(lambda d: nav_labels(d) == list(PAGES.values()))
    assert nav_labels(driver) == list(PAGES.values())  # not "app, benchmark, exactness, step through, theory"
    assert driver.title == APP_TITLE  # app.py's set_page_config ran: the page sits in its frame
    assert driver.current_url.rstrip("/") == f"{url}/{path}".rstrip("/")
    assert exceptions(driver) == []


def test_share_link_restores_the_widgets(driver, app_url):
    open_page(driver, app_url, "?drafter=lookup&num_draft_tokens=6&auto_k=false&temperature=0.5&bogus=1")  # a fixed k: k's slider is k
    drafter = driver.find_element(By.CSS_SELECTOR, ".st-key-drafter input").get_attribute("value")  # the select's shown label
    assert drafter.startswith("prompt lookup")
    assert slider_value(driver, "num_draft_tokens") == "6"
    assert slider_value(driver, "temperature") == "0.50"
    warnings = " ".join(w.text for w in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentWarning"]'))
    assert "bogus" in warnings
    assert exceptions(driver) == []
    # the page mirrors what it restored (and drops what it refused) in its own URL
    wait(driver, 30).until(lambda d: "bogus" not in d.current_url and "num_draft_tokens=6" in d.current_url)
    assert "drafter=lookup" in driver.current_url
