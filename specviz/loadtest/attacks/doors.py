"""The doors a raw client can knock on, each closed or capped in shared mode: every BackMsg kind, with a file_urls_request
that names a million files, sent before the session ran any script; uploads under made-up file ids, over the
session's caps, over the largest upload, and over the race page's own cap; and more open connections from one
address than the room's balancer allows a source; one session submitting its guess in the room exercise over and
over."""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
import urllib.request
from collections import Counter

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import KEY_GUESS, KEY_GUESS_SUBMIT, RACE_PAGE
from specviz.loadtest.attacks.harness import ATTACKER_SOURCE, REPLICA_A, Config, Harness
from specviz.loadtest.room import STICKY_COOKIE
from specviz.workshop.replicas.balancer import conn_per_source

ANSWER_WITHIN_S = 10.0  # a file_urls_request's answer is due at once; none by then: dropped
MB = 2**20


def replica_health_s(h: Harness, replica: str = REPLICA_A) -> float:
    """Seconds until the replica's /_stcore/health answers through the balancer (pinned by the sticky cookie)."""
    request = urllib.request.Request(f"{h.url}/_stcore/health", headers={"Cookie": f"{STICKY_COOKIE}={replica}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as resp:
        resp.read()
    return round(time.perf_counter() - t0, 2)


def _refused_lines(h: Harness, offset: int, replica: str = REPLICA_A) -> list[str]:
    with open(h.handle.log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    return [line for line in text.split("\n") if line.startswith(f"[{replica}]") and "refused" in line]


def _hostile(kind: str):
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg()
    field = BackMsg.DESCRIPTOR.fields_by_name[kind]
    if kind == "backend_operation_request":
        msg.backend_operation_request.request_id = "x" * 100_000
        msg.backend_operation_request.install_skills.SetInParent()
    elif kind == "file_urls_request":
        msg.file_urls_request.file_names.extend(["f.json"] * 2)
    elif field.message_type is not None:
        getattr(msg, kind).SetInParent()
    else:
        setattr(msg, kind, True)
    return msg


def attack_backmsgs(h: Harness, cfg: Config) -> dict:
    """Every BackMsg kind but a script run (twice each), then one file_urls_request of cfg.frame_names names, from a
    session that ran no script: which got an answer, the replica's health latency after the big frame."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    offset = lp.log_size(h.handle.log_path)
    s = h.session(replica=REPLICA_A)
    s.connect()
    out: dict = {"one_name_answered": bool(s.upload_urls(["one.json"], ANSWER_WITHIN_S))}
    kinds = [f.name for f in BackMsg.DESCRIPTOR.oneofs_by_name["type"].fields if f.name not in ("rerun_script", "file_urls_request")]
    out["two_names_answered"] = bool(s.upload_urls(["a.json", "b.json"], ANSWER_WITHIN_S))
    for _ in range(2):
        for kind in kinds:
            s.send(_hostile(kind))
    out["kinds_sent"] = len(kinds) + 1
    crowd = BackMsg()
    crowd.file_urls_request.file_names.extend(["x"] * cfg.frame_names)
    out["frame_names"], out["frame_mb"] = cfg.frame_names, round(crowd.ByteSize() / 1e6, 1)
    t0 = time.perf_counter()
    try:
        s.send(crowd)
        out["health_s"] = replica_health_s(h)
        urls = s.upload_urls(["after.json"], max(ANSWER_WITHIN_S, cfg.attack_s))  # answered in order: the crowd first
        out["frame_answered"], out["closed"] = urls is not None and len(urls) > 1, False
    except Exception as exc:  # the server closed the websocket (1009: message too big; or a reset while sending)
        out["frame_answered"], out["closed"] = False, f"{type(exc).__name__}: {str(exc)[:80]}"
        out.setdefault("health_s", replica_health_s(h))
    out["frame_s"] = round(time.perf_counter() - t0, 2)
    s.close()
    time.sleep(2.0)  # the room relays its replicas' output about every half second
    out["refused_lines"] = len(_refused_lines(h, offset))
    return out


def attack_uploads(h: Harness, cfg: Config) -> dict:
    """PUTs of cfg.upload_mb MB under made-up ids, then minted ids past the session's caps, a body over the largest
    upload (by its Content-Length), and one over the race page's own cap: the status of each."""
    s = h.session(replica=REPLICA_A)
    s.connect()
    urls = s.upload_urls(["first.json"], ANSWER_WITHIN_S) or []
    if not urls:
        return {"error": "no upload URL was minted for one name"}
    base = urls[0][1].rsplit("/", 1)[0]
    body = b"0" * (cfg.upload_mb * MB)
    out: dict = {"upload_mb": cfg.upload_mb}
    out["made_up"] = dict(Counter(s.upload(f"{base}/made-up-{i}", body, timeout_s=cfg.attack_s) for i in range(cfg.upload_puts)))
    minted = []
    for i in range(cfg.upload_puts):
        got = s.upload_urls([f"{i}.json"], ANSWER_WITHIN_S)
        minted.append(s.upload(got[0][1], body, timeout_s=cfg.attack_s) if got else "no URL")
    out["minted"] = dict(Counter(minted))
    out["over_largest"] = s.upload(urls[0][1], b"", declared=60 * MB, timeout_s=30)
    s.close()
    race = h.session(replica=REPLICA_A, page=RACE_PAGE)
    race.open()  # the race page draws its uploader: 4 MB
    got = race.upload_urls(["race.json"], ANSWER_WITHIN_S)
    out["over_race_cap"] = race.upload(got[0][1], b"", declared=10 * MB, timeout_s=30) if got else "no URL"
    race.close()
    return out


def _answered(sock: socket.socket, host: str) -> bool:
    """A health check on an open connection: answered (an HTTP status line), or closed unanswered."""
    try:
        sock.sendall(f"GET /_stcore/health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return sock.recv(64).startswith(b"HTTP/")
    except OSError:
        return False


def attack_conn_flood(h: Harness, cfg: Config) -> dict:
    """The room's per-source limit plus cfg.conn_over connections from the attacker's address, all held open, then a
    health check on each: how many were answered (at most the limit) and how many closed unanswered."""
    limit = conn_per_source(h.env)
    url = urllib.parse.urlsplit(h.url)
    opened: list[socket.socket] = []
    failed = 0
    try:
        for _ in range(limit + cfg.conn_over):
            try:
                s = socket.create_connection((url.hostname, url.port), timeout=10, source_address=(ATTACKER_SOURCE, 0))
                opened.append(s)
            except OSError:
                failed += 1
        time.sleep(1.0)  # the balancer has taken (or refused) every one
        answered = sum(_answered(s, url.netloc) for s in opened)
        return {"limit": limit, "connections": limit + cfg.conn_over, "answered": answered, "refused": len(opened) - answered + failed}
    finally:
        for s in opened:
            with contextlib.suppress(OSError):
                s.close()


def attack_guesses(h: Harness, cfg: Config) -> dict:
    """An exercise (a pair's truth file, as `serve-pair` writes it; no services needed to guess), one session on the
    race page submitting its guess cfg.guess_clicks times, A and B in turn: the lines and bytes of the exercise's votes
    file, and whether a new exercise starts a file of its own."""
    from specviz.workshop.race_room import TRUTH_FILE, Pair, RaceRoom, votes_file

    room = RaceRoom(h.run_dir)
    pair = Pair.new(("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"), 0, "lookup")
    room.start_pair(pair)
    s = h.session(page=RACE_PAGE, timeout_s=cfg.attack_s)
    try:
        s.open()
        if not s.has_widget(KEY_GUESS_SUBMIT, ("button",)):
            return {"error": "the race page drew no guess button for the exercise"}
        t0 = time.monotonic()
        for i in range(cfg.guess_clicks):
            s.stage(KEY_GUESS, f"service {'AB'[i % 2]}")
            s.click(KEY_GUESS_SUBMIT)
        out: dict = {"clicks": cfg.guess_clicks, "seconds": round(time.monotonic() - t0, 1), "exceptions": len(s.exceptions())}
        path = h.run_dir / votes_file(pair.id)
        data = path.read_bytes() if path.exists() else b""
        out.update(lines=data.count(b"\n"), bytes=len(data), voters=len(room.guesses(pair.id)))
        second = Pair.new(tuple(sv.url for sv in pair.services), 1, "lookup")
        room.start_pair(second)
        s.rerun()
        s.click(KEY_GUESS_SUBMIT)
        old_now = path.read_bytes() if path.exists() else None  # a new exercise removes the last one's votes
        out["new_exercise_own_file"] = len(room.guesses(second.id)) == 1 and old_now in (None, data)
        return out
    finally:
        s.close()
        (h.run_dir / TRUTH_FILE).unlink(missing_ok=True)  # the exercise ends: the next attack's race page draws none
