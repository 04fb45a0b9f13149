"""NVIDIA's aiperf (0.13.0) pointed at an OpenAI-compatible server (tests/test_aiperf.py: at `specviz serve`).

aiperf lives in a virtual environment of its own (scripts/aiperf_venv.sh builds it once, under
~/.cache/specviz-aiperf-venv): it pins its own transformers, pandas and plotly. It runs offline with `--tokenizer`
naming a folder that holds the served model's tokenizer (write_tokenizer); HF_HUB_OFFLINE must NOT be set for it: in
0.13.0 that turns the local folder into a hub id ("Repo id must be in the form 'repo_name'...") and the run fails.

What it reads from a speculating server (aiperf/spec_decode/vllm_adapter.py): vLLM's `metrics.speculative_decoding`
on the response (streamed: on the one usage chunk, which it always asks for with stream_options.include_usage). It
keeps a request's object only if its counts add up and its histogram has num_spec_tokens + 1 bins. What it writes
(profile_export_aiperf.json): per-request metrics summarised over requests (`spec_decode_acceptance_length` and
friends: avg, percentiles, count), run totals, and `pooled_spec_decode_acceptance_histogram` ({j: steps}, zero
bins left out); per request (profile_export.jsonl) the same metrics one record each.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specviz.loadtest import REPO

VENV_SCRIPT = REPO / "scripts" / "aiperf_venv.sh"
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"


class AiperfUnavailable(RuntimeError):
    """The venv could not be built (no PyPI, no python3-venv): the aiperf test skips with this message."""


def venv(timeout_s: float = 1800.0) -> Path:
    """The aiperf venv, built by scripts/aiperf_venv.sh on first use (minutes; later calls return at once)."""
    try:
        done = subprocess.run(["bash", str(VENV_SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AiperfUnavailable(f"scripts/aiperf_venv.sh did not finish: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(line for line in done.stderr.splitlines() if "is ignored: it is neither" not in line)[-1500:]
        raise AiperfUnavailable(f"scripts/aiperf_venv.sh failed ({done.returncode}): {tail}")
    return Path(done.stdout.strip().splitlines()[-1])


def write_tokenizer(tokenizer, folder: Path) -> Path:
    """The served model's tokenizer saved where aiperf's --tokenizer can load it offline (tokenizer.json and config)."""
    tokenizer.save_pretrained(str(folder))
    return folder


def write_prompts(path: Path, prompts: Sequence[str], output_length: int) -> Path:
    """aiperf's single_turn dataset (JSONL): one chat turn per line, each asking for output_length tokens."""
    path.write_text("".join(json.dumps({"text": p, "output_length": output_length}) + "\n" for p in prompts), encoding="utf-8")
    return path


def profile(aiperf_venv: Path, url: str, model: str, tokenizer: Path, input_file: Path, out_dir: Path, requests: int,
            timeout_s: float = 300.0) -> Profile:  # fmt: skip
    """`aiperf profile --endpoint-type chat --streaming` over input_file, one request at a time, in order; its exports."""
    command = [
        str(aiperf_venv / "bin" / "aiperf"), "profile", "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--tokenizer", str(tokenizer), "--input-file", str(input_file), "--custom-dataset-type", "single_turn",
        "--dataset-sampling-strategy", "sequential", "--request-count", str(requests), "--concurrency", "1",
        "--workers-max", "1", "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry", "--artifact-dir", str(out_dir),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # see the module docstring
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    summary = out_dir / SUMMARY_FILE
    if done.returncode != 0 or not summary.is_file():
        raise RuntimeError(f"aiperf failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    records = [json.loads(line) for line in (out_dir / RECORDS_FILE).read_text(encoding="utf-8").splitlines() if line.strip()]
    records.sort(key=lambda r: r["metadata"]["request_start_ns"])
    return Profile(json.loads(summary.read_text(encoding="utf-8")), records, done.stdout)


@dataclass(frozen=True)
class Profile:
    """One aiperf run's exports: the summary (profile_export_aiperf.json), the per-request records in the order the
    requests started (profile_export.jsonl), and its console (the "Spec Decode" table among it)."""

    summary: dict
    records: list[dict]
    console: str

    def per_request(self, tag: str) -> list[float | None]:
        """A metric's value for each request, in order (None where aiperf had none for that request)."""
        return [(r["metrics"].get(tag) or {}).get("value") for r in self.records]

    @property
    def pooled_histogram(self) -> dict[int, int]:
        """pooled_spec_decode_acceptance_histogram: j -> verify steps that kept exactly j drafts, over all requests
        (aiperf leaves zero bins out)."""
        return {int(j): n for j, n in (self.summary.get("pooled_spec_decode_acceptance_histogram") or {}).items()}
