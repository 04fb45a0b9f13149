"""The container image end to end, with podman: built from the repository's Dockerfile on a local Debian base (images
cannot be pulled here), started as a participant would find it, stepped once through the protocol client, stopped,
and started again as a room on the same volume, where the saved run's ?run= link restores it.

Checked: the server runs as a non-root user, answers its HEALTHCHECK, is in shared mode, loads the embedded model from
the float cache baked into the image (the log says so, and never says it de-quantised), saves runs on the volume, and
the room (HAProxy inside the image) restores a run saved before the restart and Steps it on.

The build reuses podman's layer cache: the first build on a machine takes minutes (the requirements layer), a code
change rebuilds the code layers only (and the float cache's only when specviz/core or specviz/models change).
"""

from __future__ import annotations

import pytest

from specviz.loadtest import container as cc
from specviz.loadtest.protocol import StSession

pytestmark = pytest.mark.container
TAG = "localhost/specviz:test"
BUILD_TIMEOUT_S = 3600  # a first build downloads and installs the requirements (minutes); later ones hit the cache
CACHE_LINE = "float weights from the cache /opt/specviz/cache/"  # specviz.models.loading's line for a cache hit


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    if not cc.have_podman():
        pytest.skip("podman is missing: scripts/test.sh installs podman, runc and mmdebstrap (apt-get install podman runc mmdebstrap)")
    log = tmp_path_factory.mktemp("container") / "build.log"
    cc.build(TAG, cc.ensure_local_base(), local_pip=True, timeout_s=BUILD_TIMEOUT_S, log_path=log)
    return TAG


def test_the_image_serves_shared_mode_from_the_float_cache_and_a_room_restores_its_runs(image):
    with cc.volume() as data:
        with cc.started(image, volume=data) as app:
            app.wait_healthy()
            assert cc.podman("healthcheck", "run", app.name, check=False).returncode == 0, app.logs()[-3000:]
            assert app.exec("id", "-u").strip() == "1000"
            _, first = cc.first_step(app.url)
            assert any("Shared server" in text for text in first.texts()), first.texts()
            token = dict(pair.split("=", 1) for pair in first.query.split("&")).get("run")
            assert token, first.query
            assert app.exec("ls", "/data/runs").split() == [f"{token}.json"]
            exit_code = app.stop()
            log = app.logs()
        assert CACHE_LINE in log and "de-quanti" not in log, log[-4000:]
        assert exit_code != 137, log[-3000:]  # SIGTERM stopped it; it did not need a SIGKILL

        room = ("python", "-m", "specviz", "room", "--replicas", "1", "--bind", "127.0.0.1", "--port", str(cc.free_port()))
        with cc.started(image, volume=data, command=room, port=int(room[-1])) as again:
            again.wait_healthy()
            with StSession(again.url, f"max_new_tokens=16&run={token}", timeout_s=cc.STEP_TIMEOUT_S) as session:
                texts = session.texts()
                assert session.metric("rounds") == "1", texts
                assert any("Restored this run at round 1" in t for t in texts) and any("Served by replica r1" in t for t in texts), texts
                session.click("Step")
                assert session.metric("rounds") == "2" and not session.exceptions()
            room_log = again.logs()
        assert CACHE_LINE in room_log and "de-quanti" not in room_log and "Traceback" not in room_log, room_log[-4000:]
