"""What a real page sends passes the shared-mode guard (specviz.ui.common.backmsgs, issue 42 items 1-2): Chromium on a
shared server opens a recording through its uploader, steps it, opens the race page and sends a file to its uploader,
and the server's log shows no refused message or upload (the allowlist drops nothing a page needs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, main_text, metric_value, open_page, wait, wait_idle
from tests.browser.conftest import Server, run_app
from tests.browser.test_replay import EXAMPLE, upload


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_app(tmp_path_factory.mktemp("doors") / "server.log", env={"SPECVIZ_MODE": "shared"}) as server:
        yield server


def test_a_real_page_sends_nothing_the_guard_refuses(driver, shared_server, tmp_path):
    url = shared_server.url
    open_page(driver, url)
    upload(driver, EXAMPLE)  # file_urls_request, the PUT, the rerun with the file's id
    wait_idle(driver)
    click_button(driver, "step")
    wait(driver, 30).until(lambda d: metric_value(d, "rounds") == "2")
    not_a_race = tmp_path / "not-a-race.json"
    not_a_race.write_text('{"hello": "world"}', encoding="utf-8")
    open_page(driver, f"{url}/race")
    box = wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.st-key-race_file input[type="file"]'))[0]
    box.send_keys(str(not_a_race))
    wait(driver, 60).until(lambda d: "not a race specviz can play" in main_text(d))  # the page read the stored file
    assert exceptions(driver) == []
    refused = [line for line in shared_server.log().splitlines() if "refused" in line and "shared mode" in line]
    assert refused == []
