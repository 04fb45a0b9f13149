"""The commands as a teacher types them: `python -m specviz serve` answers the openai client and stops on SIGTERM;
`python -m specviz serve-pair` starts two services that look the same from outside, writes which one speculates to
the run directory, and stops both when it is stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from specviz.config import EMBEDDED_TARGET
from specviz.workshop.processes import answers_ok
from specviz.workshop.race_room import RaceRoom
from tests.service_helpers import wait_until

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.smollm  # the subprocesses load the embedded model


def free_port_pair() -> int:
    """A port P with P and P + 1 free."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise RuntimeError("no two free ports in a row")


def healthy(root: str) -> bool:
    return answers_ok(f"{root}/health")


def start(args: list[str], tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SPECVIZ_RUN_DIR": str(tmp_path / "runs")}
    return subprocess.Popen([sys.executable, "-m", "specviz", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stopped(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_answers_and_stops_on_sigterm(tmp_path):
    port = free_port_pair()
    proc = start(["serve", "--drafter", "none", "--port", str(port), "--max-tokens", "8", "--dtype", "float32"], tmp_path)
    root = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(root) or proc.poll() is not None, 300, "serve answering")
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        with openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0) as c:
            r = c.chat.completions.create(model=EMBEDDED_TARGET, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
        assert r.usage.completion_tokens <= 4 and r.usage.model_extra["specviz"]["tokens_per_target_pass"] == 1.0  # plain: one per pass
    finally:
        assert stopped(proc) in (0, -signal.SIGTERM)


def test_serve_pair_hides_which_one_speculates_and_stops_both(tmp_path):
    port = free_port_pair()
    proc = start(["serve-pair", "--port", str(port), "--max-tokens", "8", "--dtype", "float32"], tmp_path)
    roots = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
    room = RaceRoom(tmp_path / "runs")
    try:
        wait_until(lambda: room.pair() is not None or proc.poll() is not None, 400, "serve-pair writing its truth")
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        pair = room.pair()
        assert [s.url for s in pair.services] == [r + "/v1" for r in roots]
        assert sorted(s.drafter for s in pair.services) == ["lookup", "none"]
        answers = []
        for root in roots:
            with openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0) as c:
                assert [m.id for m in c.models.list().data] == [EMBEDDED_TARGET]
                raw = c.chat.completions.with_raw_response.create(model=EMBEDDED_TARGET, messages=[{"role": "user", "content": "Repeat: a b c"}], max_tokens=6)
                r = raw.parse()
                assert "specviz" not in (r.usage.model_extra or {}) and "x-specviz-tokens-per-target-pass" not in raw.headers
                answers.append(r.choices[0].message.content)
        assert answers[0] == answers[1]  # the same text from both: only the timing differs
    finally:
        assert stopped(proc) in (0, -signal.SIGTERM)
    wait_until(lambda: not any(healthy(r) for r in roots), 60, "both services stopping")


def test_serve_asks_for_its_api_key_and_names_a_local_model_by_its_name(tmp_path, tiny_dir):
    """The key from SPECVIZ_API_KEY (out of the process list), the served id the folder's name, not its path."""
    port = free_port_pair()
    key = "sk-cli-0123456789abcdef"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SPECVIZ_API_KEY": key}
    proc = subprocess.Popen([sys.executable, "-m", "specviz", "serve", "--target", str(tiny_dir["llama"]), "--drafter", "none", "--port", str(port),
                             "--max-tokens", "4", "--dtype", "float32"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(root) or proc.poll() is not None, 300, "serve answering")
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        with openai.OpenAI(base_url=root + "/v1", api_key=key, max_retries=0) as c:
            assert [m.id for m in c.models.list().data] == ["llama"]
            assert c.completions.create(model="llama", prompt="the cat", max_tokens=2).usage.completion_tokens <= 2
        with openai.OpenAI(base_url=root + "/v1", api_key="wrong", max_retries=0) as c, pytest.raises(openai.AuthenticationError):
            c.models.list()
    finally:
        assert stopped(proc) in (0, -signal.SIGTERM)
