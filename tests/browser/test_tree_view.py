"""A token-tree run in a real browser: the tree-width slider, a few Steps, and the tree beside its attention
mask drawn by plotly (screenshot_tree.png in assets/ with SPECVIZ_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import time

from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, metric_value, nudge_slider, open_page, set_text, wait, wait_idle

STEP_TIMEOUT_S = 180
PROMPT = "Repeat exactly: the cat sat on the mat. the cat ate the fish. the cat sat on the rug. the cat ate the cake. the cat sat on the mat."
TREE_SVG = ".st-key-tree_chart .js-plotly-plot .main-svg"
MASK_SVG = ".st-key-tree_mask_chart .js-plotly-plot .main-svg"


def test_a_tree_round_is_drawn_beside_its_mask(driver, app_url, screenshot_dir):
    open_page(driver, app_url)
    set_text(driver, "prompt", PROMPT)
    wait_idle(driver)
    nudge_slider(driver, "tree_width", 1)  # 1 -> 2 children per node
    wait_idle(driver)
    for n in range(6):  # until the latest round's tree has a rejected sibling (or 6 rounds)
        click_button(driver, "step")
        wait(driver, STEP_TIMEOUT_S).until(lambda d, n=n: metric_value(d, "rounds") == str(n + 1))
        wait_idle(driver, STEP_TIMEOUT_S)
        trees = driver.find_elements(By.CSS_SELECTOR, TREE_SVG)
        if trees and "rejected" in trees[0].text:
            break
    assert exceptions(driver) == []
    wait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, TREE_SVG) and d.find_elements(By.CSS_SELECTOR, MASK_SVG))
    heading = next(h for h in driver.find_elements(By.CSS_SELECTOR, "h3") if "Token tree" in h.text)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'}); document.activeElement && document.activeElement.blur();", heading)
    wait_idle(driver)
    time.sleep(0.5)
    assert driver.save_screenshot(str(screenshot_dir / "screenshot_tree.png"))
