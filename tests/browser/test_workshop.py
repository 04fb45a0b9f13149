"""A shared-mode server in a real browser: participants see no developer menu or Deploy button, no risky options
and no free-text model paths; a session whose tab closes is freed by the server after the disconnect grace."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, metric_value, open_page, wait, wait_idle
from tests.browser.conftest import Server, run_app

STEP_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, tiny_dir) -> Iterator[Server]:
    """The app in shared mode (SPECVIZ_MODE=shared, as on a public address) with the tiny llama as the only target,
    a short disconnect grace so the test sees a closed tab freed, and info logging to see the sweeper."""
    env = {"SPECVIZ_MODE": "shared", "SPECVIZ_TARGETS": str(tiny_dir["llama"])}
    args = ["--server.disconnectedSessionTTL", "5", "--logger.level", "info"]
    log_path = tmp_path_factory.mktemp("streamlit_shared") / "server.log"
    with run_app(log_path, env=env, args=args, drop_env=("STREAMLIT_", "SPECVIZ_")) as server:
        yield server


def test_participants_see_only_what_the_owner_allowed_and_closed_tabs_are_freed(make_driver, shared_server, tiny_dir):
    driver = make_driver()
    open_page(driver, shared_server.url)
    assert driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAppDeployButton"]') == []
    menu = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMainMenu"] button, [data-testid="stMainMenu"]')
    if menu:  # toolbarMode "viewer" keeps the viewer's items (rerun, settings, print) and drops the developer's
        menu[0].click()
        wait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stMainMenuList"], [role="menu"], ul[role="listbox"]'))
        items = " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMainMenuList"], [role="menu"], ul[role="listbox"]'))
        assert "Clear cache" not in items and "Deploy" not in items and "Developer" not in items, items
        driver.find_element(By.TAG_NAME, "body").send_keys("\ue00c")  # Escape closes the menu
    sidebar = driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"]')
    assert "Shared server" in sidebar.text
    for key in ("trust_remote_code", "allow_pickle", "allow_download", "device", "dtype", "model_pair"):
        assert driver.find_elements(By.CSS_SELECTOR, f".st-key-{key}") == [], key
    assert driver.find_elements(By.CSS_SELECTOR, ".st-key-target input[type='text']:not([role='combobox']), .st-key-target textarea") == []
    click_button(driver, "step")
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "1")
    wait_idle(driver, STEP_TIMEOUT_S)
    assert exceptions(driver) == []

    # the participant goes away: the server frees the session after the grace (5 s here) and a sweep (every 5 s)
    # (closed, not navigated away: Chromium may keep a page it leaves in its back-forward cache, socket and all)
    app_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.switch_to.window(app_tab)
    driver.close()
    driver.switch_to.window(driver.window_handles[0])
    deadline = time.monotonic() + 60
    while "specviz freed" not in shared_server.log():
        assert time.monotonic() < deadline, shared_server.log()[-3000:]
        time.sleep(1)
    assert "Traceback" not in shared_server.log()
