"""A room of containers that share nothing but Redis (issue 46, item 3), with podman: a Redis container (Debian's
redis-server on the local Debian base: images cannot be pulled here), two replica containers of the repository's image
(`python -m specviz replica`, a memory limit each, each with only its own anonymous /data volume) and a balancer
container of the same image (`python -m specviz room --replicas 0 --backend ...`: HAProxy only).

All on the host's network (podman's bridge networks do not run on these machines; specviz.loadtest.container): Redis
on loopback, the replicas on this machine's non-loopback address with the balancer's address (the same one) as their
trusted proxy, the balancer on loopback. compose.yaml's profile `room` is this layout with a network of its own.

Checked: present on one replica, a follower pinned to the other redraws the presenter's next round; three wrong keys
from one client, spread over both replicas, lock that client on both; the container holding a participant's run is
killed, and the run's ?run= link restores it on the other replica, which Steps on. Needs the room's store on Redis
(specviz.workshop.store): skipped where it is missing. Slow (builds, four containers, the embedded model)."""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from specviz.loadtest import container as cc
from specviz.loadtest.presenter import PRESENTER, shown_round
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import pin_replica, sticky_replica
from specviz.workshop import presenter_key as pk
from specviz.workshop.processes import free_port
from tests.test_container import BUILD_TIMEOUT_S
from tests.test_room_backends import host_address

pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(importlib.util.find_spec("specviz.workshop.store.redis_store") is None, reason="the room's store has no Redis backend here (issue 46, part A)"),
]
TAG = "localhost/specviz:room-test"
REDIS_TAG = "localhost/specviz-redis:test"
REPLICA_MEMORY = "3g"  # compose.yaml's mem_limit for a replica
REDRAW_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[str, str]:
    if not cc.have_podman():
        pytest.skip("podman is missing: scripts/test.sh installs podman, runc and mmdebstrap (apt-get install podman runc mmdebstrap)")
    log = tmp_path_factory.mktemp("container-room") / "build.log"
    cc.build(TAG, cc.ensure_local_base(), local_pip=True, timeout_s=BUILD_TIMEOUT_S, log_path=log)
    return TAG, cc.ensure_redis_image(REDIS_TAG)


def mounts(c: cc.Container) -> set[str]:
    """The names (volumes) or host paths (binds) mounted into a container."""
    out = cc.podman("inspect", "--format", "{{range .Mounts}}{{.Name}}|{{.Source}} {{end}}", c.name).stdout.split()
    return {m.split("|")[0] or m.split("|")[1] for m in out}


def downs(balancer: cc.Container, backend: str) -> int:
    return balancer.logs().count(f"replicas/{backend} is DOWN")


def guess(url: str, replica: str, key: str, source: str) -> tuple[str, str | None]:
    """One try at the presenter key from a fresh session held on `replica`: what the sidebar said, where it landed."""
    with pin_replica(StSession(url, source=source), replica) as session:
        session.set_widget("present_key", key)
        session.click("present")
        assert not session.exceptions(), session.exceptions()
        return " ".join(session.alerts()), sticky_replica(session)


def wait_for_round(session: StSession, n: int, timeout_s: float) -> int | None:
    """What a browser does while following: draw what the server pushes, tick the page's timed fragment on its
    interval; the round shown once it reaches n, else the last one shown."""
    deadline, due = time.monotonic() + timeout_s, 0.0
    while time.monotonic() < deadline:
        if (shown := shown_round(session)) is not None and shown >= n:
            return shown
        session.wait_for_run(timeout_s=0.5)
        if session.auto_reruns and time.monotonic() >= due:
            fid = min(session.auto_reruns, key=session.auto_reruns.get)
            session.rerun(fragment_id=fid)
            due = time.monotonic() + session.auto_reruns.get(fid, 2.0)
    return shown_round(session)


@dataclass
class ContainerRoom:
    url: str
    key: str
    replicas: list[cc.Container]
    balancer: cc.Container


@pytest.fixture(scope="module")
def room(images) -> Iterator[ContainerRoom]:
    """Redis, two replica containers and the balancer, started once for the module's tests (in order: the last kills
    a replica)."""
    image, redis_image = images
    address = host_address() or "127.0.0.1"
    key, store_port = pk.generate_key(), free_port()
    env = {
        "SPECVIZ_STORE": f"redis://127.0.0.1:{store_port}/0", "STREAMLIT_SERVER_COOKIE_SECRET": secrets.token_hex(32),
        "SPECVIZ_PRESENTER_KEY": key, "HF_HUB_OFFLINE": "1",
    }  # fmt: skip
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(cc.started(redis_image, command=("redis-server", "--port", str(store_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"), port=store_port))
        replicas = []
        for i in range(2):
            port = free_port(address)
            command = ("python", "-m", "specviz", "replica", "--bind", address, "--port", str(port), "--trusted-proxy", address, "--id", f"c{i + 1}")
            replicas.append(stack.enter_context(cc.started(image, command=command, env=env, port=port, host=address, flags=("--memory", REPLICA_MEMORY))))
        port = free_port()
        command = ("python", "-m", "specviz", "room", "--replicas", "0", "--port", str(port), *(a for r in replicas for a in ("--backend", f"{address}:{r.port}")))
        balancer = stack.enter_context(cc.started(image, command=command, port=port, flags=("--memory", "512m")))
        for r in replicas:
            r.wait_healthy()
        balancer.wait_healthy()
        deadline = time.monotonic() + 30  # both replicas UP in HAProxy's eyes (checked every 2 s), not only one
        while balancer.logs().count(" is UP") < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert redis.running()
        yield ContainerRoom(balancer.url, key, replicas, balancer)
        for r in replicas:
            if r.running():
                assert "Traceback" not in r.logs(), r.logs()[-4000:]


def test_the_replicas_share_no_volume_and_have_memory_limits(room):
    first, second = (mounts(r) for r in room.replicas)
    assert not first & second, (first, second)  # each replica's /data is its own: nothing shared but Redis
    for r in room.replicas:
        assert cc.podman("inspect", "--format", "{{.HostConfig.Memory}}", r.name).stdout.strip() == str(3 * 2**30)


def test_present_on_one_replica_and_a_follower_on_the_other_redraws(room):
    with pin_replica(StSession(room.url, PRESENTER.query(64), timeout_s=cc.STEP_TIMEOUT_S), "r1") as teacher:
        teacher.click("step")
        teacher.set_widget("present_key", room.key)
        teacher.click("present")
        assert any("You are presenting" in t for t in teacher.alerts()), teacher.alerts()
        assert sticky_replica(teacher) == "r1"
        with pin_replica(StSession(room.url, timeout_s=cc.STEP_TIMEOUT_S), "r2") as follower:
            assert sticky_replica(follower) == "r2" and any("Served by replica c2" in t for t in follower.texts()), follower.texts()
            assert wait_for_round(follower, 1, REDRAW_TIMEOUT_S) == 1, follower.alerts()
            teacher.click("step")
            assert wait_for_round(follower, 2, REDRAW_TIMEOUT_S) == 2, follower.alerts()
            assert not follower.exceptions() and not teacher.exceptions()
        teacher.click("stop_present")  # the room is everyone's own again for the tests below
        assert not any("You are presenting" in t for t in teacher.alerts()), teacher.alerts()


def test_three_wrong_keys_from_one_client_are_limited_on_both_replicas(room):
    for n, replica in enumerate(["r1", "r2", "r1"][: pk.CLIENT_FREE_TRIES]):
        said, landed = guess(room.url, replica, f"wrong guess {n}", "127.0.0.11")
        assert landed == replica and "That is not the presenter key" in said, said
    assert "from your address" in said, said
    for replica in ("r1", "r2"):
        said, landed = guess(room.url, replica, room.key, "127.0.0.11")
        assert landed == replica and "Too many wrong keys from your address" in said, said


def test_a_killed_replicas_run_restores_on_the_other_from_its_link(room):
    with pin_replica(StSession(room.url, "max_new_tokens=16", timeout_s=cc.STEP_TIMEOUT_S), "r1") as participant:
        if participant.has_widget("follow"):  # a presentation still live: this participant wants its own run
            participant.set_widget("follow", False)
        participant.click("step")
        assert participant.metric("rounds") == "1" and not participant.exceptions()
        token = dict(pair.split("=", 1) for pair in participant.query.split("&")).get("run")
    assert token, participant.query
    before = downs(room.balancer, "r1")
    cc.podman("kill", room.replicas[0].name)
    deadline = time.monotonic() + 60
    while downs(room.balancer, "r1") == before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert downs(room.balancer, "r1") > before, room.balancer.logs()[-3000:]
    with pin_replica(StSession(room.url, f"max_new_tokens=16&run={token}", timeout_s=cc.STEP_TIMEOUT_S), "r1") as again:
        texts = again.texts()
        assert any("Restored this run at round 1" in t for t in texts) and any("Served by replica c2" in t for t in texts), texts
        again.click("Step")
        assert again.metric("rounds") == "2" and not again.exceptions()
