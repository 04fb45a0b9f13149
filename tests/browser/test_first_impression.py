"""The step-through page's first impression (issue 43), in a real browser on a laptop and on a phone: after each of
the first Steps the newest generated token is in view without scrolling, and the default run speculates from the
first Step (it drafts, keeps at least one draft, and so commits more than one token per target pass)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from specviz.loadtest.browser import exceptions, metric_value, open_page, wait, wait_idle

STEP_TIMEOUT_S = 180  # the first round of a fresh server loads SmolLM2
GENERATED = '.specviz-stream span[title]:not([title="prompt"])'  # every generated / drafted token carries a hover title
SCREENS = {"laptop": (1366, 768, False), "phone": (390, 844, True)}  # width, height, mobile (touch)


def emulate(driver, width: int, height: int, mobile: bool) -> None:
    """The viewport of a laptop or a phone (Chromium's device emulation: exact CSS pixels, touch on a phone)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": mobile, "maxTouchPoints": 5 if mobile else 1})


def press(driver, key: str) -> None:
    """Press a keyed button as a tap would: a DOM click, no scrolling (under Chromium's phone emulation a WebDriver
    click misses the emulated viewport and reports the button not interactable)."""
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, f".st-key-{key} button:not([disabled])"))
    driver.execute_script("arguments[0].click();", driver.find_element(By.CSS_SELECTOR, f".st-key-{key} button"))


def newest_token_box(driver) -> dict:
    """The newest generated token's box in the viewport (getBoundingClientRect) and the window's height and scroll."""
    return driver.execute_script(
        "const t = document.querySelectorAll(arguments[0]); const last = t[t.length - 1], first = t[0];"
        "const r = last.getBoundingClientRect();"
        "return {top: r.top, bottom: r.bottom, first_y: first.getBoundingClientRect().top + window.scrollY,"
        " height: window.innerHeight, scroll: window.scrollY, count: t.length};",
        GENERATED,
    )


@pytest.fixture
def screen_driver(make_driver, request):
    width, height, mobile = SCREENS[request.param]
    driver = make_driver()
    emulate(driver, width, height, mobile)
    return driver  # make_driver quits it at the end of the session


@pytest.mark.parametrize("screen_driver", list(SCREENS), indirect=True)
def test_each_step_shows_its_newest_token_without_scrolling(screen_driver, app_url, request):
    driver = screen_driver
    open_page(driver, app_url)
    for n in range(3):
        press(driver, "step")
        wait(driver, STEP_TIMEOUT_S).until(lambda d, want=str(n + 1): metric_value(d, "rounds") == want)
        wait_idle(driver, STEP_TIMEOUT_S)
        box = newest_token_box(driver)
        if n == 0:
            per_pass = metric_value(driver, "tokens / target pass")
            print(f"{request.node.callspec.id}: first generated token at y = {box['first_y']:.0f} px; first Step: {per_pass} tokens per target pass")
            assert float(per_pass) > 1, f"the first Step did not speculate: {per_pass} tokens per target pass"
        assert box["scroll"] == 0, box
        assert 0 <= box["top"] and box["bottom"] <= box["height"], f"after Step {n + 1} the newest token is out of view: {box}"
    assert exceptions(driver) == []


BAR_MAX_HEIGHT_PX = 56  # one row of buttons (36-40 px) and the bar's padding; two rows were ~90
BAR_BUTTONS = {"step": "Step", "run_all": "Run to end", "play": "Play", "reset": "Reset", "save_run": "Save run"}  # key: accessible name
BAR_SCREENS = {**SCREENS, "small laptop": (1024, 768, False)}  # a 1024 px window leaves the row ~550 px with the sidebar open


@pytest.mark.parametrize("screen", list(BAR_SCREENS))
def test_the_control_bar_is_one_row(make_driver, app_url, screen):
    """The control bar is one row (every button, the glossary's too) on a laptop, a small laptop and a phone; Step
    is in view and answers a tap at its centre, shows its word, and every button keeps its word as its accessible
    name (on a phone the others show icons only)."""
    driver = make_driver()
    emulate(driver, *BAR_SCREENS[screen])
    first_step(driver, app_url)
    bar = driver.execute_script(
        "const bar = document.querySelector('[data-testid=\"stLayoutWrapper\"]:has(> .st-key-step_controls)').getBoundingClientRect();"
        "const tops = [...document.querySelectorAll('.st-key-step_controls button')].map(b => b.getBoundingClientRect()).filter(r => r.height > 0).map(r => Math.round(r.top));"
        "return {height: bar.height, tops: tops};"  # a touch screen's hidden copies of the buttons have no height
    )
    print(f"{screen}: control bar {bar['height']:.0f} px tall, buttons at y = {sorted(set(bar['tops']))}")
    assert len(bar["tops"]) >= len(BAR_BUTTONS) + 1 and max(bar["tops"]) - min(bar["tops"]) < 10, f"the controls are not one row: {bar}"
    assert bar["height"] <= BAR_MAX_HEIGHT_PX, f"the control bar is {bar['height']:.0f} px tall"
    step = in_view(driver, ".st-key-step button")
    assert step["inside"], f"Step is out of view: {step}"
    hit = driver.execute_script(
        "const b = [...document.querySelectorAll('.st-key-step button')].find(e => e.getBoundingClientRect().height > 0), r = b.getBoundingClientRect();"
        "return b.contains(document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2));"
    )
    assert hit, "something covers the Step button's centre"
    for key, word in BAR_BUTTONS.items():
        button = next(b for b in driver.find_elements(By.CSS_SELECTOR, f".st-key-{key} button") if b.rect["height"] > 0)
        assert button.accessible_name.startswith(word), f"{key}: a screen reader hears {button.accessible_name!r}"
        if key == "step":
            assert button.find_element(By.CSS_SELECTOR, "p").rect["width"] > 10, "Step lost its visible word"
    assert exceptions(driver) == []


def test_the_phone_layout_is_compact(make_driver, app_url):
    """On a phone the metrics sit in a grid, not one per row, and plotly draws no mode bar."""
    driver = make_driver()
    emulate(driver, *SCREENS["phone"])
    first_step(driver, app_url)
    metric_rows = {round(m.rect["y"]) for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')}
    metrics = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')
    assert len(metric_rows) < len(metrics), f"{len(metrics)} metrics in {len(metric_rows)} rows"
    assert driver.find_elements(By.CSS_SELECTOR, ".modebar-container .modebar") == [], "plotly's mode bar is drawn"


def clipped_text(driver, key: str) -> list[str]:
    """Texts inside a keyed element that a box cuts off (Streamlit's ellipsis: overflow hidden, scrollWidth beyond
    clientWidth). Fails if the key is not on the page."""
    found = driver.execute_script(
        "const root = document.querySelector(`.st-key-${arguments[0]}`); if (!root) return null;"
        "return [root, ...root.querySelectorAll('*')].filter(e => e.textContent.trim()"
        " && getComputedStyle(e).overflow !== 'visible' && e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.trim());",
        key,
    )
    assert found is not None, f"no .st-key-{key} on the page"
    return found


def first_step(driver, app_url: str) -> None:
    open_page(driver, app_url)
    press(driver, "step")
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "1")
    wait_idle(driver, STEP_TIMEOUT_S)


@pytest.mark.parametrize("screen_driver", list(SCREENS), indirect=True)
def test_the_inspector_reads_well(screen_driver, app_url, tmp_path, request):
    """Beside the text on a laptop, under it on a phone: no label cut off, and the chart as wide as the inspector
    (its story above the chart, not squeezed into a column beside it)."""
    from tests.browser.st_browser import save_section_screenshot

    driver = screen_driver
    first_step(driver, app_url)
    for key in ("inspect_follow", "inspect_last_rejection"):
        assert clipped_text(driver, key) == [], f"{key}: label cut off"
    chart = driver.find_element(By.CSS_SELECTOR, ".st-key-inspector_chart").rect
    column = driver.execute_script(
        "let box = document.querySelector('[data-testid=\"stMainBlockContainer\"]'), e = arguments[0];"
        "while ((e = e.parentElement?.closest('[data-testid=\"stColumn\"]'))) box = e;"  # the outermost column
        "return box.getBoundingClientRect().width;",
        driver.find_element(By.CSS_SELECTOR, ".st-key-inspector_chart"),
    )
    print(f"{request.node.callspec.id}: inspector chart {chart['width']:.0f} px wide in a {column:.0f} px column")
    assert chart["width"] >= 0.9 * column - 40, f"the chart is squeezed: {chart['width']:.0f} px of {column:.0f}"
    save_section_screenshot(driver, "Round inspector", tmp_path / f"inspector_{request.node.callspec.id}.png")  # to look at
    assert exceptions(driver) == []


def in_view(driver, css: str) -> dict:
    """The first drawn match's box in the viewport and whether all of it is inside the window (on a touch screen
    Streamlit keeps a hidden copy of a button with a tooltip: skip boxes of no height)."""
    return driver.execute_script(
        "const r = [...document.querySelectorAll(arguments[0])].map(e => e.getBoundingClientRect()).find(b => b.height > 0);"
        "return {top: r.top, bottom: r.bottom, height: window.innerHeight, inside: r.top >= 0 && r.bottom <= window.innerHeight};",
        css,
    )


@pytest.mark.parametrize("screen_driver", list(SCREENS), indirect=True)
def test_the_controls_stay_in_view_when_scrolled(screen_driver, app_url, request):
    """Scrolled down to the curves, the control bar is still on screen: Step is in the viewport (not under the header)."""
    driver = screen_driver
    first_step(driver, app_url)
    driver.execute_script("[...document.querySelectorAll('[data-testid=\"stMain\"] h3')].pop().scrollIntoView({block: 'end'});")
    wait_idle(driver)
    title = in_view(driver, "h1")
    assert title["bottom"] < 0, f"the page did not scroll: {title}"
    step = in_view(driver, ".st-key-step button")
    header = driver.execute_script("return document.querySelector('[data-testid=\"stHeader\"]')?.getBoundingClientRect().bottom ?? 0;")
    print(f"{request.node.callspec.id}: scrolled; Step at y = {step['top']:.0f}..{step['bottom']:.0f} px (header ends at {header:.0f})")
    assert step["inside"] and step["top"] >= header - 1, f"Step scrolled out of view: {step}, header ends at {header}"
    widths = driver.execute_script(
        "const bar = document.querySelector('.st-key-step_controls').parentElement.getBoundingClientRect().width;"
        "return [bar, document.querySelector('.st-key-step_controls').closest('[data-testid=\"stVerticalBlock\"]').getBoundingClientRect().width];"
    )
    assert widths[0] >= widths[1] - 1, f"the bar's background covers {widths[0]:.0f} of {widths[1]:.0f} px: text beside it shows through"
    driver.execute_script(
        "[...document.querySelectorAll('[data-testid=\"stMain\"] h3')].find(h => h.textContent.includes('Curves')).scrollIntoView({block: 'start'});"
    )  # as an anchor link does
    wait_idle(driver)
    bar = driver.execute_script("return document.querySelector('.st-key-step_controls').getBoundingClientRect().bottom;")
    heading = driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=\"stMain\"] h3')].find(h => h.textContent.includes('Curves')).getBoundingClientRect().top;"
    )
    assert heading >= bar, f"a heading scrolled to hides under the control bar: heading at {heading:.0f}, bar ends at {bar:.0f}"


# the next Tab starts from the top of the page again (a blur alone leaves Chromium's starting point at the old focus)
FOCUS_TOP = "const a = document.createElement('button'); document.body.prepend(a); a.focus(); a.remove(); window.scrollTo(0, 0);"
SKIP_TABS_TO_STEP = 2  # after Skip to main content: the model's load status (in a session's first full run), then Step


def test_the_keyboard_reaches_step(make_driver, app_url):
    """From page load one keystroke (S) takes a Step; Tab reaches the Step button too, and its focus ring shows; by
    Streamlit's Skip to main content link (the first Tab stop) Step is at most four keystrokes away (Tab, Enter,
    Tab past the load status, Tab), not 35 Tabs through the sidebar."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver = make_driver()
    emulate(driver, *SCREENS["laptop"])
    open_page(driver, app_url)
    wait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".st-key-step button:not([disabled])"))
    ActionChains(driver).send_keys("s").perform()  # keystroke 1, with nothing focused
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "1")
    wait_idle(driver, STEP_TIMEOUT_S)
    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")
    is_step = "return document.activeElement?.tagName === 'BUTTON' && !!document.activeElement.closest('.st-key-step');"
    tabs = 0
    while not driver.execute_script(is_step) and tabs < 80:
        ActionChains(driver).send_keys(Keys.TAB).perform()
        tabs += 1
    print(f"Tab presses from the top of the page to Step: {tabs}")
    assert driver.execute_script(is_step), "Tab never reaches the Step button"
    driver.execute_script(FOCUS_TOP)
    ActionChains(driver).send_keys(Keys.TAB).perform()  # Streamlit's first stop: Skip to main content
    assert "Skip to main content" in driver.execute_script("return document.activeElement.innerText;")
    ActionChains(driver).send_keys(Keys.ENTER).perform()
    skip_tabs = 0
    while not driver.execute_script(is_step) and skip_tabs < 10:
        ActionChains(driver).send_keys(Keys.TAB).perform()
        skip_tabs += 1
    print(f"Tab, Enter (Skip to main content), then {skip_tabs} Tabs to Step")
    assert driver.execute_script(is_step) and skip_tabs <= SKIP_TABS_TO_STEP, f"{skip_tabs} Tabs from the main content to Step"
    ring = driver.execute_script(
        "const s = getComputedStyle(document.activeElement); return {style: s.outlineStyle, width: parseFloat(s.outlineWidth)};"
    )
    assert ring["style"] != "none" and ring["width"] >= 2, f"no visible focus ring on Step: {ring}"
    assert exceptions(driver) == []
