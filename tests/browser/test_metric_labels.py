"""The step-through page's speedup metric label fits its column at common window widths (not cut with an ellipsis,
as "speedup (wall clo…" was): a replayed example recording draws the metrics without a model. (At 1280 px
"accepted / drafted" and "tokens / target pass" are cut too; they are not shortened here, see issue 26.)"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import metric_value, open_page, wait, wait_idle
from tests.browser.conftest import REPO

EXAMPLE = REPO / "assets" / "recordings" / "prose-early-exit-T1.json"
CUT_LABELS_JS = """
return [...document.querySelectorAll('[data-testid="stMetricLabel"]')].flatMap(label =>
  [label, ...label.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 1).map(() => label.innerText.trim()));
"""


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_speedup_label_is_not_cut(driver, app_url, width):
    driver.set_window_size(width, 1000)
    try:
        open_page(driver, app_url)
        box = wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.st-key-recording input[type="file"]'))[0]
        box.send_keys(str(EXAMPLE))
        wait(driver, 60).until(lambda d: metric_value(d, "rounds") == "1")
        wait_idle(driver, 60)
        labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')]
        assert "speedup" in labels, labels
        cut = sorted(set(driver.execute_script(CUT_LABELS_JS)))
        assert "speedup" not in cut and not [c for c in cut if c.startswith("speedup")], f"cut at {width} px: {cut}"
    finally:
        driver.set_window_size(1400, 2000)
