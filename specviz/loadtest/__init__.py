"""The load-testing tools, one importable package for the scripts (thin command lines in scripts/) and the tests.

A leaf layer: it may import every other layer of specviz, and nothing in specviz imports it (tests/test_boundaries.py).
Its dev-only dependencies (websockets, selenium, psutil: requirements-dev.txt) are imported inside its modules, so
`import specviz` never needs them. The modules, bottom up:
  protocol   a Streamlit client without a browser (the app's websocket protocol)
  browser    headless Chromium: the driver and the waits for a Streamlit page (the browser tests use them too)
  server     one `streamlit run app.py` started and stopped, its health and its memory
  harness    the protocol load test: participants, solo and together runs, the summary
  room       `python -m specviz room` started for a test: its handle, stickiness, the replicas' timing lines
  presenter, forks, room_load   the room's scenarios under load (follow, fork, a replica killed)
  attacks    attacks on a shared room, each judged by its goals (a package; its __init__ says what lives where)
  container  the Dockerfile's image built and measured with podman
  aiperf     NVIDIA's aiperf (its own venv, scripts/aiperf_venv.sh) run against a server, its exports read back
The tools need a checkout (app.py, the Dockerfile): REPO is its root.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
