"""One replica on a worker machine, for a room whose balancer runs elsewhere (`specviz room --backend HOST:PORT`):
`specviz replica` checks what a replica on another host needs and then becomes it (exec: the server is this process,
so an init system's or a container engine's SIGTERM reaches it).

What every replica of one room shares, set in the environment of each worker:
* the room's store, SPECVIZ_STORE (redis://...): saved runs, the presentation, the board, the presenter key's
  counters. Unset: this machine's run directory, which replicas on other hosts do not see (said at start);
* the cookie secret, STREAMLIT_SERVER_COOKIE_SECRET: a browser the balancer moves to another replica keeps a valid
  cookie. Required: a replica that made its own would break every moved browser's uploads;
* the presenter key, SPECVIZ_PRESENTER_KEY (none: presenting is off);
* the trusted proxies, SPECVIZ_TRUSTED_PROXIES and --trusted-proxy: the balancer's address as this replica sees it,
  so its X-Forwarded-For names the real client (specviz.workshop.clients); any other peer's header is never read.

Started as the room's own replicas are (specviz.workshop.replicas.supervisor: replica_command, shared_env): shared mode,
warm (WARM_START), headless. Plain Python, no streamlit import."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Mapping, Sequence

from specviz.workshop.clients import TRUSTED_PROXIES_ENV
from specviz.workshop.replicas.balancer import RoomError
from specviz.workshop.replicas.supervisor import COOKIE_SECRET_ENV, REPO, replica_command, shared_env
from specviz.workshop.store import STORE_ENV, open_store

log = logging.getLogger(__name__)

MAX_ID_CHARS = 40


def replica_id(given: str | None, port: int) -> str:
    """The name this replica shows (*Served by replica ...*) and logs: --id, else HOST:PORT (a pod's or container's
    host name is its own)."""
    text = (given or f"{socket.gethostname()}:{port}").strip()
    if not text or len(text) > MAX_ID_CHARS or not all(c.isalnum() or c in "-_.:" for c in text):
        raise RoomError(f"--id {text[:MAX_ID_CHARS]!r}: up to {MAX_ID_CHARS} letters, digits and - _ . : (it is shown on the page).")
    return text


def trusted_proxies(env: Mapping[str, str], extra: Sequence[str]) -> str:
    """SPECVIZ_TRUSTED_PROXIES with --trusted-proxy entries added, every entry checked (an address or a CIDR network);
    RoomError naming a bad one (the app would only log and ignore it, and then count every client as the balancer)."""
    entries = [e.strip() for e in env.get(TRUSTED_PROXIES_ENV, "").split(",") if e.strip()] + [e.strip() for e in extra]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise RoomError(f"trusted proxy {entry[:60]!r} is not an address or a CIDR network (e.g. 10.0.0.5 or 10.0.0.0/24).") from None
    return ",".join(dict.fromkeys(entries))


def worker_env(env: Mapping[str, str], address: str, port: int, trusted: Sequence[str] = (), given_id: str | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment of a replica on a worker, and the warnings to show at start. RoomError when something the room
    cannot work without is missing or wrong."""
    out = shared_env(dict(env))
    if not out.get(COOKIE_SECRET_ENV, "").strip():
        raise RoomError(
            f"{COOKIE_SECRET_ENV} is not set: every replica of a room needs the room's one cookie secret (the same value on "
            "every worker and for `specviz room`'s own replicas), or a browser moved to another replica breaks. Make one with "
            "`python3 -c 'import secrets; print(secrets.token_hex(32))'`."
        )
    out[TRUSTED_PROXIES_ENV] = trusted_proxies(out, trusted)
    out["SPECVIZ_REPLICA_ID"] = replica_id(given_id, port)
    warnings = []
    if not out[TRUSTED_PROXIES_ENV] and address not in ("127.0.0.1", "::1", "localhost"):
        warnings.append(
            f"no trusted proxy is set: every client will count as the balancer's address (one client for the per-client "
            f"limits). Give the balancer's address with --trusted-proxy ADDRESS (or {TRUSTED_PROXIES_ENV})."
        )
    if out.get(STORE_ENV, "").strip():
        try:
            open_store(out)  # the URL's form only: it connects lazily (the replica waits for the store at start)
        except ValueError as exc:
            raise RoomError(str(exc)) from None
    else:
        warnings.append(
            f"{STORE_ENV} is not set: saved runs, the presentation and the key counters stay in this machine's run directory, "
            f"which replicas on other hosts do not see. Set {STORE_ENV}=redis://HOST:6379/0, the room's store, on every worker."
        )
    return out, warnings


def exec_replica(address: str, port: int, env: dict[str, str], streamlit_args: Sequence[str] = ()) -> None:
    """Become the replica (os.execve: never returns)."""
    cmd = replica_command(address, port, env["SPECVIZ_REPLICA_ID"], streamlit_args)
    os.chdir(REPO)
    os.execve(cmd[0], cmd, env)
