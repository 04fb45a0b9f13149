"""The container image (Dockerfile) built, started and measured with podman: one markdown row for docs/deploy.md.

    python scripts/container_check.py                      # build from scratch (--no-cache) on python:3.11-slim, measure
    python scripts/container_check.py --local-base         # on a machine that cannot pull images (this project's)
    python scripts/container_check.py --quick              # the image as built (layers cached), one start, one Step

What it measures, in this order, with the 1-minute load average and the CPU before and after:
* **build**: `podman build` wall time (from scratch unless --quick: only the base image may come from the cache);
* **image size**: as `podman image inspect` reports it (uncompressed, all layers), and the bytes a pull transfers
  (the layers gzip-compressed, as a registry stores them; --quick skips this);
* **run → healthy**: from `podman run -d` to the first 200 from `/_stcore/health`;
* **healthy → first Step**: a protocol client (specviz.loadtest.protocol) opens the page and presses Step once; the
  clock stops when the round is on the page (this includes loading the embedded model from the image's float cache);
* **idle memory**: the RSS of every process in the container, summed, after the Step and --idle-s seconds of quiet.

Run it on a quiet machine (measure nothing while other work runs); the row's load average says how quiet it was.

The module is also the container test's tooling (tests/test_container.py): the local Debian base image, this
machine's pip settings for a build without a registry's torch, starting and stopping a container.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specviz.loadtest import REPO
from specviz.loadtest.harness import cpu_model
from specviz.loadtest.protocol import StSession
from specviz.loadtest.server import healthy
from specviz.workshop.processes import free_port

PODMAN = "podman"
LOCAL_BASE = "localhost/debian-py:bookworm"  # Debian's python3 (3.11 on bookworm), made here by mmdebstrap
MMDEBSTRAP = ["mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm"]
# On this project's machines crun refuses the host's cgroup layout and the default rlimits: runc, the host's network,
# and limits below the host's (HAProxy in a room raises its open files to about 8,200: the hard limit must allow it).
RUN_FLAGS = ["--runtime", "runc", "--net=host", "--ulimit", "nofile=1024:16384", "--ulimit", "nproc=1024:4096"]
BUILD_FLAGS = ["--format", "docker", "--network=host"]  # docker format: OCI images drop HEALTHCHECK
HEALTH_TIMEOUT_S = 240.0
STEP_TIMEOUT_S = 300.0


def have_podman() -> bool:
    return shutil.which(PODMAN) is not None


def podman(*args: str, timeout_s: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run podman; its stderr is kept (podman says there why a command failed)."""
    done = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} … failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def ensure_local_base(tag: str = LOCAL_BASE, timeout_s: float = 900) -> str:
    """A Debian bookworm base with python3 (images cannot be pulled here): mmdebstrap a root file system, import it."""
    if image_exists(tag):
        return tag
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("mmdebstrap is missing: apt-get install mmdebstrap (scripts/test.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="specviz-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        done = subprocess.run([*MMDEBSTRAP, str(rootfs)], capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"mmdebstrap failed: {done.stderr.strip()[-2000:]}")
        podman("import", str(rootfs), tag, timeout_s=300)
    return tag


# Redis for the room's store in the container test (tests/test_container_room.py): Debian's redis-server on the local
# base, since images cannot be pulled here (compose.yaml uses the image redis:7).
REDIS_CONTAINERFILE = f"""FROM {LOCAL_BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
USER redis
CMD ["redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
"""


def ensure_redis_image(tag: str, timeout_s: float = 900) -> str:
    """A Redis image built here on the local Debian base (Debian's redis-server package), unless tag exists."""
    if image_exists(tag):
        return tag
    ensure_local_base()
    with tempfile.TemporaryDirectory(prefix="specviz-redis-") as tmp:
        (Path(tmp) / "Containerfile").write_text(REDIS_CONTAINERFILE, encoding="utf-8")
        podman("build", "--network=host", "-t", tag, tmp, timeout_s=timeout_s)
    return tag


def pip_settings() -> dict[str, str]:
    """This machine's pip settings (`pip config list`, then PIP_* variables), name -> value."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60).stdout
    settings: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    for name, value in os.environ.items():
        if name.startswith("PIP_") and value:
            settings[name[4:].lower().replace("_", "-")] = value
    return settings


def local_pip_build_args(workdir: Path) -> list[str]:
    """`podman build` flags that let pip inside the build use this machine's settings: a pip.conf with its CA bundle,
    wheel folders and local indexes, each mounted read-only at its own path. When a local folder holds a CPU torch
    wheel, TORCH_INDEX_URL is emptied, so pip takes it from there instead of PyTorch's index."""
    settings = pip_settings()
    lines, mounts = ["[global]"], set()
    for key in ("cert", "index-url", "extra-index-url", "find-links", "trusted-host", "default-timeout"):
        if key not in settings:
            continue
        lines.append(f"{key} = {settings[key]}")
        for item in settings[key].split():
            path = item.removeprefix("file://")
            if not path.startswith("/") or not os.path.exists(path):
                continue
            # an index folder's pages point to files beside it (../../files/...): mount the folder above "simple"
            mounts.add(str(Path(path).parent) if key.endswith("index-url") else path)
    conf = workdir / "pip.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["-v", f"{conf}:/etc/pip.conf:ro"]
    for path in sorted(mounts):
        args += ["-v", f"{path}:{path}:ro"]
    folders = [p for p in settings.get("find-links", "").split() if os.path.isdir(p)]
    if any(w.name.startswith("torch-") and "+cpu" in w.name for f in folders for w in Path(f).glob("*.whl")):
        args += ["--build-arg", "TORCH_INDEX_URL="]
    return args


def image_id(tag: str) -> str | None:
    done = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def build(tag: str, base: str | None, *, local_pip: bool, no_cache: bool = False, timeout_s: float = 3600, log_path: Path | None = None) -> float:
    """`podman build` the repository's Dockerfile; returns the wall time in seconds. The image the tag named before is
    removed when nothing else names it (its layers that the new one shares stay, as the build cache)."""
    previous = image_id(tag)
    with tempfile.TemporaryDirectory(prefix="specviz-build-") as tmp:
        args = [*BUILD_FLAGS, "-t", tag, "-f", str(REPO / "Dockerfile")]
        if base:
            args += ["--build-arg", f"BASE_IMAGE={base}"]
        if local_pip:
            args += local_pip_build_args(Path(tmp))
        if no_cache:
            args.append("--no-cache")
        start = time.perf_counter()
        done = subprocess.run([PODMAN, "build", *args, str(REPO)], capture_output=True, text=True, timeout=timeout_s)
        seconds = time.perf_counter() - start
    if log_path is not None:
        log_path.write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise RuntimeError(f"podman build failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    if previous and previous != image_id(tag):
        podman("rmi", previous, check=False)  # refused while another tag or a container uses it
    return seconds


@dataclass
class Container:
    """One started container (host network: it listens on this machine's `host` (loopback) at `port`)."""

    name: str
    port: int
    started: float  # time.perf_counter() when `podman run` was called
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def running(self) -> bool:
        return podman("inspect", "--format", "{{.State.Running}}", self.name, check=False).stdout.strip() == "true"

    def wait_healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> float:
        """Seconds from `podman run` to the first healthy answer; RuntimeError (with the log) if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while not healthy(self.url):
            if not self.running() or time.monotonic() > deadline:
                raise RuntimeError(f"container {self.name} did not become healthy:\n{self.logs()[-4000:]}")
            time.sleep(0.1)
        return time.perf_counter() - self.started

    def exec(self, *command: str) -> str:
        return podman("exec", self.name, *command).stdout

    def stop(self, timeout_s: int = 30) -> int:
        """`podman stop` (SIGTERM, then SIGKILL after timeout_s); the exit code (137: it had to be killed)."""
        podman("stop", "-t", str(timeout_s), self.name, timeout_s=timeout_s + 60, check=False)
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name, check=False).stdout.strip() or -1)

    def rss_mb(self) -> float:
        """The RSS of every process in the container, summed (read from this machine's /proc)."""
        import psutil

        pid = int(podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout.strip())
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


@contextlib.contextmanager
def started(image: str, *, volume: str | None = None, command: tuple[str, ...] = (), env: dict[str, str] | None = None, port: int | None = None,
            host: str = "127.0.0.1", flags: tuple[str, ...] = ()) -> Iterator[Container]:  # fmt: skip
    """`podman run -d` the image on a free port (PORT=port, unless the command names its own), stop and remove it after.
    host: the address it answers on (its command binds it); flags: more `podman run` flags (a memory limit)."""
    port = port or free_port()
    name = f"specviz-{uuid.uuid4().hex[:10]}"
    args = ["run", "-d", "--name", name, *RUN_FLAGS, *flags, "-e", f"PORT={port}"]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    if volume:
        args += ["-v", f"{volume}:/data"]
    start = time.perf_counter()
    podman(*args, image, *command)
    container = Container(name, port, start, host)
    try:
        yield container
    finally:
        if container.running():
            container.stop()
        podman("rm", "-f", "-v", name, check=False)  # -v: an anonymous /data volume goes too


@contextlib.contextmanager
def volume() -> Iterator[str]:
    """A fresh named volume, removed after."""
    name = f"specviz-data-{uuid.uuid4().hex[:10]}"
    podman("volume", "create", name)
    try:
        yield name
    finally:
        podman("volume", "rm", "-f", name, check=False)


def first_step(url: str, query: str = "max_new_tokens=16") -> tuple[float, StSession]:
    """Open the page and press Step once; seconds until the round is on the page, and the (closed) session."""
    start = time.perf_counter()
    with StSession(url, query, timeout_s=STEP_TIMEOUT_S) as session:
        session.click("Step")
        seconds = time.perf_counter() - start
        if session.metric("rounds") != "1" or session.exceptions():
            raise RuntimeError(f"the first Step did not make a round: rounds={session.metric('rounds')!r}, {session.exceptions()}")
    return seconds, session


def compressed_mb(tag: str) -> float:
    """What a pull transfers: the image's layers gzip-compressed (level 6, as registries store them)."""
    with tempfile.TemporaryDirectory(prefix="specviz-save-") as tmp:
        archive = Path(tmp) / "image"
        podman("save", "--format", "docker-dir", "-o", str(archive), tag, timeout_s=1800)
        total = 0
        for layer in archive.iterdir():
            if layer.name.endswith((".json", "version")) or not layer.is_file():
                continue
            out = Path(tmp) / "layer.gz"
            with open(layer, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            total += out.stat().st_size
            out.unlink()
    return total / 2**20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", default="localhost/specviz:check", help="the image to build and start (default localhost/specviz:check)")
    p.add_argument("--base", default=None, help="BASE_IMAGE (default: the Dockerfile's, python:3.11-slim)")
    p.add_argument("--local-base", action="store_true", help=f"build on {LOCAL_BASE}, made here with mmdebstrap when missing")
    p.add_argument("--local-pip", action="store_true", help="mount this machine's pip settings into the build (implied by --local-base)")
    p.add_argument("--quick", action="store_true", help="build with the layer cache and skip the compressed size (a smoke run)")
    p.add_argument("--idle-s", type=float, default=20.0, help="quiet seconds after the Step before the memory is read (20)")
    p.add_argument("--json", action="store_true", help="also print the numbers as one JSON object")
    args = p.parse_args(argv)
    if not have_podman():
        print("podman is missing: apt-get install podman runc (Debian)", file=sys.stderr)
        return 2

    base = ensure_local_base() if args.local_base else args.base
    load_before = os.getloadavg()[0]
    build_s = build(args.tag, base, local_pip=args.local_pip or args.local_base, no_cache=not args.quick)
    size_mb = int(podman("image", "inspect", "--format", "{{.Size}}", args.tag).stdout.strip()) / 2**20
    pull_mb = None if args.quick else compressed_mb(args.tag)
    with volume() as data, started(args.tag, volume=data) as c:
        healthy_s = c.wait_healthy()
        step_s, _ = first_step(c.url)
        time.sleep(args.idle_s)
        idle_mb = c.rss_mb()
        dequantised = "de-quanti" in c.logs()  # ours says de-quantising, transformers de-quantizing
    load_after = os.getloadavg()[0]

    numbers = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_model(), "load_before": round(load_before, 2), "load_after": round(load_after, 2),
        "base": base or "python:3.11-slim", "image_mb": round(size_mb), "pull_mb": None if pull_mb is None else round(pull_mb),
        "build_s": round(build_s, 1), "cached_build": args.quick, "run_to_healthy_s": round(healthy_s, 2),
        "healthy_to_first_step_s": round(step_s, 2), "idle_rss_mb": round(idle_mb), "dequantised_at_start": dequantised,
    }  # fmt: skip
    pull = "–" if pull_mb is None else f"{pull_mb * 2**20 / 1e9:.2f}"
    build_note = " (cached)" if args.quick else ""
    print("| date | machine | load (before → after) | base | image (GB) | pull, gzip (GB) | build (s) | run → healthy (s) | healthy → first Step (s) | idle memory (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {numbers['date']} | {numbers['cpu']} | {load_before:.2f} → {load_after:.2f} | {numbers['base']} | {size_mb * 2**20 / 1e9:.2f} | {pull} | "
        f"{build_s:.0f}{build_note} | {healthy_s:.1f} | {step_s:.1f} | {idle_mb:.0f} |"
    )
    if args.json:
        print(json.dumps(numbers))
    if dequantised:
        print("warning: the container de-quantised the model at start (its float cache was not used)", file=sys.stderr)
        return 1
    return 0

