"""Browser fixtures: one live `streamlit run app.py` per session and headless Chromium drivers against it.

Debian's chromium + chromedriver are installed by scripts/test.sh (the README's test command).
Set SPECVIZ_UPDATE_SCREENSHOTS=1 to write screenshots into assets/ (the README shows them); otherwise
they go to a temporary folder so a test run never dirties the tree."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMEDRIVER = Path(os.environ.get("SPECVIZ_CHROMEDRIVER", "/usr/bin/chromedriver"))
CHROMIUM = Path("/usr/bin/chromium")
SERVER_START_TIMEOUT_S = 90
PAGE_TIMEOUT_S = 60  # a cold start loads SmolLM2 (de-quantised once, then cached) before the first round



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session", autouse=True)
def _require_browser() -> None:
    """Skip (before a server starts) where Debian's chromium and its driver are missing."""
    if not CHROMEDRIVER.exists() or not CHROMIUM.exists():
        pytest.skip(
            "Browser tests need Debian's chromium and chromium-driver (/usr/bin/chromedriver); "
            "scripts/test.sh installs them (apt-get install chromium chromium-driver)."
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"ok"
    except OSError:
        return False


@dataclass(frozen=True)
class Server:
    url: str
    log_path: Path
    pid: int = 0  # the server process (its memory and threads)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_app(
    log_path: Path, *, env: dict[str, str] | None = None, args: Sequence[str] = (), drop_env: tuple[str, ...] = ("STREAMLIT_",), script: str = "app.py"
) -> Iterator[Server]:
    """`streamlit run app.py` on a free loopback port, offline, file watcher off (edits to the checkout during a run
    must not rerun or re-scan pages); yields once its health endpoint answers (which starts no script session), and
    always stops it. env: extra variables; args: extra streamlit flags (a flag given twice: the last wins); drop_env:
    prefixes of inherited variables to drop; script: another app to run (a test's own)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(drop_env)}
    full_env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", **(env or {}))
    cmd = [
        sys.executable, "-m", "streamlit", "run", script,
        "--server.port", str(port), "--server.headless", "true", "--server.address", "127.0.0.1",
        "--server.fileWatcherType", "none", *args,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with code {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit was not healthy after {SERVER_START_TIMEOUT_S}s:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.25)
        yield Server(url, log_path, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.returncode not in (0, -15, None):
            print(f"streamlit server log ({log_path}):\n{log_path.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="session")
def streamlit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The app for the whole session, on the developer's defaults (localhost: the owner's mode)."""
    with run_app(tmp_path_factory.mktemp("streamlit") / "server.log") as server:
        yield server


@pytest.fixture(scope="session")
def app_url(streamlit_server: Server) -> str:
    return streamlit_server.url


def _new_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-dev-shm-usage", "--window-size=1400,2000",
    ):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    return driver


@pytest.fixture(scope="session")
def make_driver() -> Iterator[Callable[[], object]]:
    """A factory for extra drivers (several users at once); every driver it made quits at the end."""
    drivers = []

    def make():
        driver = _new_driver()
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        try:
            driver.quit()
        except Exception:  # a crashed browser is already gone
            pass


@pytest.fixture(scope="session")
def driver(make_driver):
    """One browser shared by the single-user tests (starting Chromium costs ~1 s each time)."""
    return make_driver()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("SPECVIZ_UPDATE_SCREENSHOTS") == "1":
        path = REPO / "assets"
        path.mkdir(exist_ok=True)
        return path
    return tmp_path_factory.mktemp("screenshots")
