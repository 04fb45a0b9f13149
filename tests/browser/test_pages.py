"""Every page renders in a real browser: no exception element, the app title, the sidebar navigation."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, open_page, wait, wait_idle
from tests.browser.st_browser import PAGES, save_screenshot

APP_TITLE = "specviz: speculative decoding, step by step"  # app.py's page_title


def nav_labels(driver) -> list[str]:
    # each link's text is "<icon>\n<title>"
    return [a.text.strip().splitlines()[-1] for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]')]


@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_without_exception(driver, app_url, path, screenshot_dir):
    open_page(driver, app_url, path)
    assert exceptions(driver) == []
    assert driver.title == APP_TITLE
    assert nav_labels(driver) == list(PAGES.values())
    assert driver.current_url.rstrip("/") == f"{app_url}/{path}".rstrip("/")
    charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"]')
    if charts:  # every chart on the page has drawn its SVG
        wait(driver, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"] .main-svg')) >= len(charts))
    if path in ("theory", "exactness"):  # step-through and benchmark are shot after they have run something
        save_screenshot(driver, screenshot_dir / f"screenshot_{path}.png")


def test_sidebar_links_reach_every_page(driver, app_url):
    open_page(driver, app_url)
    for path, title in PAGES.items():
        link = next(a for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]') if a.text.strip().endswith(title))
        link.click()
        wait(driver, 30).until(lambda d, path=path: d.current_url.rstrip("/") == f"{app_url}/{path}".rstrip("/"))
        wait_idle(driver)
        assert exceptions(driver) == []


def test_benchmark_runs_and_draws_charts(driver, app_url, screenshot_dir):
    """The default sweep (1 copy prompt, lookup at k = 2 and 4, 32 tokens, SmolLM2) runs and draws its charts, in a tab
    beside the shipped table."""
    open_page(driver, app_url, "benchmark")
    click_button(driver, "bench_run")
    tabs = lambda d: [t.text for t in d.find_elements(By.CSS_SELECTOR, '[role="tab"]')]  # noqa: E731
    wait(driver, 300).until(lambda d: "This session's sweep" in tabs(d))
    wait_idle(driver, 120)
    assert exceptions(driver) == []
    assert "Measured earlier on a 2-core CPU" in tabs(driver)  # the shipped table stays beside the new sweep (issue 43)
    wait(driver, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"] .main-svg')) >= 2)
    save_screenshot(driver, screenshot_dir / "screenshot_benchmark.png")


def _nav_to(driver, app_url: str, path: str) -> None:
    """Follow the sidebar's link to a page (the same browser session, unlike opening its URL)."""
    title = PAGES[path]
    next(a for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]') if a.text.strip().endswith(title)).click()
    wait(driver, 30).until(lambda d: d.current_url.rstrip("/") == f"{app_url}/{path}".rstrip("/"))
    wait_idle(driver)


def test_theory_marks_the_ks_auto_chose_and_links_back(driver, app_url, screenshot_dir):
    """Before a run the theory page says how to get one; after a Step with k: auto (the default), its speedup-by-k
    chart's caption names what auto chose, and the link under it goes back to the Step-through page."""
    open_page(driver, app_url, "theory")
    captions = " ".join(c.text for c in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stCaptionContainer"]'))
    assert "Step through a run with k: auto" in captions
    open_page(driver, app_url)
    click_button(driver, "step")
    wait_idle(driver)
    _nav_to(driver, app_url, "theory")
    assert exceptions(driver) == []
    captions = " ".join(c.text for c in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stCaptionContainer"]'))
    assert "Diamonds: the ks k: auto chose in your step-through run" in captions, captions
    link = driver.find_element(By.CSS_SELECTOR, '[data-testid="stPageLink-NavLink"]')
    assert "Back to its rounds" in link.text
    driver.execute_script("arguments[0].scrollIntoView({block: 'end'});", link)
    driver.save_screenshot(str(screenshot_dir / "theory_auto_k.png"))  # the chart with auto's diamonds, for a look
    link.click()
    wait(driver, 30).until(lambda d: d.current_url.rstrip("/") == app_url.rstrip("/"))
    wait_idle(driver)
    assert exceptions(driver) == []
