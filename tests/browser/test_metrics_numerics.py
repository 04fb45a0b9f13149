"""The metrics table and per-position acceptance on the step-through page, and the numerics lab, in a real browser."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from specviz.loadtest.browser import click_button, exceptions, main_text, metric_value, open_page, wait, wait_idle
from tests.browser.st_browser import save_section_screenshot
from tests.browser.test_step_through import step

PLOTLY_SVG = '[data-testid="stPlotlyChart"] .main-svg'


def test_metrics_table_and_acceptance_by_position(driver, app_url, screenshot_dir):
    open_page(driver, app_url)
    for n in range(4):
        step(driver, n)
    assert exceptions(driver) == []
    wait(driver, 60).until(lambda d: "Every metric by its name" in main_text(d) and "Acceptance by draft position" in main_text(d))
    assert driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"]')  # the metrics table (a canvas grid)
    assert "the formula assumes" in main_text(driver) or "Too few rounds" in main_text(driver)  # the per-position verdict
    save_section_screenshot(driver, "Every metric by its name", screenshot_dir / "screenshot_metrics.png")


def test_numerics_lab_runs(driver, app_url, screenshot_dir):
    open_page(driver, app_url, "numerics")
    click_button(driver, "num_run")
    wait(driver, 600).until(lambda d: metric_value(d, "float32 · plain vs float32 · speculative") is not None)
    wait_idle(driver, 120)
    assert exceptions(driver) == []
    assert metric_value(driver, "float32 · plain vs float32 · speculative") == "identical"
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, PLOTLY_SVG))
    save_section_screenshot(driver, "Numerics lab", screenshot_dir / "screenshot_numerics.png")
