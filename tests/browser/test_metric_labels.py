"""The step-through page's metrics fit their cells on a laptop (1366×768) and a phone (390×844): no label and no
value is cut with an ellipsis (the speedup's "measuring…" showed as "measur…" in a 150 px cell, and "speedup (wall
clo…" before it). A replayed example recording draws the metrics without a model; then every value is replaced by
the widest one the page shows, "measuring…", so the check holds whatever the clock says."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import metric_value, open_page, wait, wait_idle
from specviz.ui.step_through.step_views import MEASURING
from tests.browser.conftest import REPO
from tests.browser.test_first_impression import SCREENS, emulate

EXAMPLE = REPO / "assets" / "recordings" / "prose-early-exit-T1.json"
CUT_JS = """
return [...document.querySelectorAll('[data-testid="stMetricLabel"], [data-testid="stMetricValue"]')].flatMap(cell =>
  [cell, ...cell.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 1).map(() => cell.innerText.trim()));
"""
WIDEN_JS = """
document.querySelectorAll('[data-testid="stMetricValue"] p').forEach(p => { p.textContent = arguments[0]; });
"""


@pytest.mark.parametrize("screen", list(SCREENS))
def test_no_metric_label_or_value_is_cut(make_driver, app_url, screen):
    driver = make_driver()
    emulate(driver, *SCREENS[screen])
    open_page(driver, app_url)
    box = wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.st-key-recording input[type="file"]'))[0]
    box.send_keys(str(EXAMPLE))
    wait(driver, 60).until(lambda d: metric_value(d, "rounds") == "1")
    wait_idle(driver, 60)
    labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')]
    assert "speedup" in labels, labels
    assert sorted(set(driver.execute_script(CUT_JS))) == [], f"cut on the {screen}"
    driver.execute_script(WIDEN_JS, MEASURING)
    driver.execute_script("return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));")  # laid out again
    assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')] == [MEASURING] * len(labels)
    assert sorted(set(driver.execute_script(CUT_JS))) == [], f"a value as wide as {MEASURING!r} is cut on the {screen}"
