"""Which mode a session gets (specviz.workshop.policy.decide_mode): local only for a client that may be this machine's
owner (loopback, no proxy header) on a server that listens locally or says SPECVIZ_MODE=local; SPECVIZ_MODE=shared
always shared. And a room's replicas always run in shared mode, whatever the shell said."""

from __future__ import annotations

import logging

import pytest

from specviz.workshop.clients import identify
from specviz.workshop.policy import decide_mode, load_policy, mode_rule
from specviz.workshop.replicas.supervisor import Replica, Supervisor

OWNER, PARTICIPANT = True, False


@pytest.mark.parametrize(
    ("setting", "address", "owner_possible", "mode"),
    [
        (None, "localhost", OWNER, "local"),
        (None, "127.0.0.1", OWNER, "local"),
        (None, "", OWNER, "local"),  # no address given: Streamlit's default, a developer's laptop
        (None, "0.0.0.0", OWNER, "shared"),  # the owner runs it for a room: even on loopback they see the room's mode
        ("local", "0.0.0.0", OWNER, "local"),
        ("shared", "localhost", OWNER, "shared"),
        # a client that cannot be the owner is shared, whatever the bind address or SPECVIZ_MODE says
        (None, "localhost", PARTICIPANT, "shared"),
        (None, "", PARTICIPANT, "shared"),
        (None, "0.0.0.0", PARTICIPANT, "shared"),
        ("local", "localhost", PARTICIPANT, "shared"),
        ("local", "0.0.0.0", PARTICIPANT, "shared"),
        ("shared", "", PARTICIPANT, "shared"),
    ],
)
def test_the_mode_of_a_session(setting, address, owner_possible, mode):
    assert decide_mode(setting, address, owner_possible)[0] == mode
    env = {"SPECVIZ_MODE": setting} if setting else {}
    policy = load_policy(env=env, server_address=address, owner_possible=owner_possible)
    assert policy.shared == (mode == "shared")
    if policy.shared:
        assert not (policy.allow_remote_code or policy.allow_download or policy.allow_pickle or policy.allow_custom_models)


@pytest.mark.parametrize(
    ("peer", "headers", "owner_possible"),
    [
        ("127.0.0.1", {"Host": "localhost:8501"}, True),
        ("::1", {"Host": "[::1]:8501", "Origin": "http://[::1]:8501"}, True),
        ("127.0.0.1", {}, False),  # no Host: not a browser that typed a loopback address
        ("127.0.0.1", {"Host": "evil.example:8501", "Origin": "http://evil.example:8501"}, False),  # DNS rebinding
        ("127.0.0.1", {"Host": "localhost:8501", "Origin": "https://evil.example"}, False),  # another site's page
        ("192.0.2.2", {}, False),  # this machine's own LAN address is not loopback: a client of the room
        ("127.0.0.1", {"X-Forwarded-For": "192.0.2.9"}, False),  # a reverse proxy on this machine
        ("127.0.0.1", {"Forwarded": "for=192.0.2.9"}, False),
        (None, {}, False),
    ],
)
def test_who_may_be_the_owner_decides_the_mode_even_with_mode_local(peer, headers, owner_possible):
    client = identify(peer, headers, environ={})
    assert client.owner_possible == owner_possible
    assert load_policy(env={"SPECVIZ_MODE": "local"}, server_address="", owner_possible=client.owner_possible).shared != owner_possible


def test_a_bad_setting_is_still_refused_whoever_asks():
    with pytest.raises(ValueError, match="'shared' or 'local'"):
        load_policy(env={"SPECVIZ_MODE": "public"}, owner_possible=False)


def test_the_rule_and_the_reasons_say_what_decides():
    assert "every session is in shared mode" in mode_rule("shared", "localhost")
    assert "owner" in mode_rule(None, "127.0.0.1") and "every other session is in shared mode" in mode_rule(None, "127.0.0.1")
    assert "the owner's on loopback too" in mode_rule(None, "0.0.0.0")
    assert "listens on 0.0.0.0" in decide_mode(None, "0.0.0.0", OWNER)[1]
    assert "SPECVIZ_MODE=shared" in decide_mode("shared", "localhost", OWNER)[1]


def _room_env(monkeypatch, mode: str | None) -> dict[str, str]:
    if mode is None:
        monkeypatch.delenv("SPECVIZ_MODE", raising=False)
    else:
        monkeypatch.setenv("SPECVIZ_MODE", mode)
    room = Supervisor.__new__(Supervisor)  # the environment only: no HAProxy, no port
    room.replicas, room.backends = [Replica("r1", 1)], []
    return room._replica_env()


@pytest.mark.parametrize("inherited", [None, "shared", "local", "LOCAL", "auto"])
def test_a_room_runs_its_replicas_in_shared_mode_whatever_the_shell_says(monkeypatch, caplog, inherited):
    with caplog.at_level(logging.WARNING, logger="specviz.workshop.replicas"):
        env = _room_env(monkeypatch, inherited)
    assert env["SPECVIZ_MODE"] == "shared"
    said = [r.getMessage() for r in caplog.records if "SPECVIZ_MODE" in r.getMessage()]
    if inherited in (None, "shared"):
        assert said == []
    else:
        assert said and "ignored" in said[0] and "shared mode" in said[0]
