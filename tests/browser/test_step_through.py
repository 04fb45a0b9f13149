"""The step-through page in a real browser: Step draws coloured tokens and charts; HTML in the text stays text;
several users at once each get exactly what they would get alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import (
    click_button,
    exceptions,
    metric_value,
    open_page,
    set_text,
    slider_to_end,
    slider_value,
    stream_text,
    wait,
    wait_for_baseline,
    wait_idle,
)
from tests.browser.st_browser import save_screenshot

STEP_TIMEOUT_S = 180  # the first round of a fresh server loads SmolLM2 (seconds once cached, longer on a busy or cold machine)
PLOTLY = '[data-testid="stPlotlyChart"] .js-plotly-plot'
COLOURED = '.specviz-stream span[title]:not([title="prompt"])'  # every generated / drafted token carries a hover title


def step(driver, rounds_before: int) -> None:
    """Press Step and wait until the page shows one more round."""
    click_button(driver, "step")
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == str(rounds_before + 1))
    wait_idle(driver, STEP_TIMEOUT_S)


def no_alert(driver) -> bool:
    try:
        _ = driver.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_step_draws_coloured_tokens_and_charts(driver, app_url, screenshot_dir):
    open_page(driver, app_url)
    assert "Step through" in driver.find_element(By.CSS_SELECTOR, "h1").text
    for n in range(3):
        step(driver, n)
    assert exceptions(driver) == []
    tokens = driver.find_elements(By.CSS_SELECTOR, COLOURED)
    assert len(tokens) >= 3  # at least one token per round
    styles = {t.get_attribute("style") for t in tokens}
    assert any("background" in s or "line-through" in s for s in styles), styles
    wait(driver, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, PLOTLY)) >= 2)
    # plotly draws into SVG once the chart has a size: real bars, not an empty frame
    wait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{PLOTLY} .main-svg .plot path, {PLOTLY} .main-svg .bars path"))
    save_screenshot(driver, screenshot_dir / "screenshot_step_through.png")


def test_the_shown_speedup_is_never_above_the_tokens_per_pass(driver, app_url):
    """The default settings (the copy prompt, the n-gram drafter, greedy): after up to 8 Steps (the default example's
    answer ends after about 5) and the background baseline, the page shows a measured speedup, and one the physics
    allows (a round costs at least a plain pass). Issue 26 saw 5.46x at 4.88 tokens per pass: the baseline was timed
    while reruns drew on the same cores."""
    open_page(driver, app_url)
    for n in range(8):
        step(driver, n)
        if "This run is finished" in driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text:
            break
    shown = wait_for_baseline(driver)
    tokens_per_pass = float(metric_value(driver, "tokens / target pass"))
    print(f"shown speedup {shown} at {tokens_per_pass} tokens per target pass")
    assert shown.endswith("×"), f"no measured speedup: {shown}"
    assert float(shown.rstrip("×")) <= tokens_per_pass
    assert exceptions(driver) == []


def test_keyboard_steps_and_tokens_show_their_fate_on_focus(driver, app_url):
    """Issue 43: S steps (the button's shortcut); generated tokens survive Streamlit's HTML sanitiser focusable and
    named by their fate; a focused token shows its details (a tap on a phone, Tab on a keyboard: no hover); the
    stream keeps its own paper and ink in the browser; the page's focus ring is in place."""
    open_page(driver, app_url)
    driver.find_element(By.CSS_SELECTOR, "body").send_keys("s")
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "1")
    wait_idle(driver, STEP_TIMEOUT_S)
    step(driver, 1)
    tokens = driver.find_elements(By.CSS_SELECTOR, ".specviz-stream .specviz-tok")
    assert tokens and all(t.get_attribute("tabindex") == "0" for t in tokens)
    fates = ("accepted draft", "resampled", "bonus", "target step", "rejected draft", "discarded draft")
    assert all(t.get_attribute("aria-label").split(" · ")[0] in fates for t in tokens)
    driver.execute_script("arguments[0].focus()", tokens[-1])
    after = driver.execute_script("return getComputedStyle(arguments[0], '::after').content", tokens[-1])
    assert " · round " in after, after  # the token's details, drawn under it while it has the focus
    stream = driver.find_element(By.CSS_SELECTOR, ".specviz-stream")
    paper, ink = (driver.execute_script(f"return getComputedStyle(arguments[0]).{p}", stream) for p in ("backgroundColor", "color"))
    assert (paper, ink) == ("rgb(255, 255, 255)", "rgb(26, 26, 26)")
    ring = driver.execute_script("return [...document.querySelectorAll('style')].some(s => s.textContent.includes(':focus-visible'))")
    assert ring and exceptions(driver) == []


XSS_PROMPT = (
    'Repeat exactly: <script>window.__specviz_xss = 1; alert("xss")</script> '
    '<img src=x onerror="window.__specviz_xss = 2; alert(2)"> and stop.'
)


def test_html_in_prompt_and_output_renders_as_text(driver, app_url):
    open_page(driver, app_url)
    set_text(driver, "prompt", XSS_PROMPT)
    wait_idle(driver)
    for n in range(2):
        step(driver, n)
    assert no_alert(driver)
    assert driver.execute_script("return window.__specviz_xss === undefined")
    shown = stream_text(driver).replace("␣", " ")
    assert "<script>" in shown and "onerror" in shown  # the literal markup is visible
    assert driver.find_elements(By.CSS_SELECTOR, ".specviz-stream img, .specviz-stream script") == []
    assert exceptions(driver) == []


# --- several users at once ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    prompt: str
    seed: int


# Words from the tiny models' vocabulary (tests/conftest.py): a tiny shared target keeps this test about
# sessions and the shared model cache, not about SmolLM2's speed on a busy CPU.
USERS = (
    User("one two three four five six seven", 11),
    User("red orange yellow green blue indigo", 22),
    User("the cat sat on the mat and the dog sat on the log", 33),
)
ROUNDS = 2


def prepare(driver, app_url: str, user: User, target: str) -> None:
    """A fresh session on the tiny target, sampling at temperature 2 (so each session's own seeded generator
    decides every token), with this user's prompt and seed."""
    open_page(driver, app_url)
    driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"] [data-testid="stExpander"] summary').click()
    set_text(driver, "target", target)
    wait_idle(driver)
    set_text(driver, "prompt", user.prompt)
    wait_idle(driver)
    set_text(driver, "seed", str(user.seed))
    wait_idle(driver)
    slider_to_end(driver, "temperature")
    wait(driver, 30).until(lambda d: slider_value(d, "temperature") == "2.00")
    wait_idle(driver)
    assert exceptions(driver) == [] and not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')


def steps_and_text(driver, barrier: threading.Barrier | None = None) -> list[str]:
    """Step ROUNDS times; the token stream after each round."""
    if barrier is not None:
        barrier.wait(timeout=120)
    texts = []
    for n in range(ROUNDS):
        step(driver, n)
        texts.append(stream_text(driver))
    return texts


def test_several_users_at_once_match_their_solo_runs(make_driver, app_url, streamlit_server, tiny_dir):
    """Three sessions, one server, one cached model: first each steps alone, then all Reset and step at
    once; every session's stream after every round equals its solo stream."""
    target = str(tiny_dir["llama"])
    drivers = [make_driver() for _ in USERS]
    for d, user in zip(drivers, USERS):
        prepare(d, app_url, user, target)
    alone = [steps_and_text(d) for d in drivers]  # one at a time
    assert len({a[-1] for a in alone}) == len(USERS)  # different prompts and seeds give different streams

    for d in drivers:
        click_button(d, "reset")
        wait(d, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") is None)
        wait_idle(d)
    barrier = threading.Barrier(len(USERS))
    with ThreadPoolExecutor(len(USERS)) as pool:
        together = list(pool.map(lambda d: steps_and_text(d, barrier), drivers))
    for user, solo, concurrent, d in zip(USERS, alone, together, drivers):
        assert concurrent == solo, f"session with seed {user.seed} differs from its solo run"
        assert exceptions(d) == []
    assert "Traceback" not in streamlit_server.log()
