"""A room bigger than one process: N Streamlit replicas on loopback ports, HAProxy in front, and a supervisor that
starts a replica again when it exits.

One Streamlit process runs every session's script under one GIL, so a big room needs several processes. HAProxy
sends each browser to one replica and keeps it there with a cookie (``cookie SERVERID insert indirect nocache``: a
room behind one NAT address shares one IP, so hashing the source would put everyone on one replica), passes
Streamlit's websocket (``/_stcore/stream``) through with long tunnel timeouts, and checks ``/_stcore/health``. When
a replica dies its browsers reconnect to another one (``option redispatch``) and restore their run from the shared
run directory (specviz.workshop.saved_runs): the page keeps the run's token in its URL.

Every request HAProxy passes on carries the browser's address (``option forwardfor``), and the replicas read it (a
proxy on loopback is always trusted, specviz.workshop.clients; SPECVIZ_TRUSTED_PROXIES adds a proxy in front of the
room): per-client limits such as the presenter key's count real clients,
not the balancer. With ``--tls-cert PEM`` HAProxy serves HTTPS only (``bind ... ssl crt PEM``), so the presenter key
and the run tokens do not cross the room's network in clear text. Without a presenter key in the environment or the
secrets file, the room makes a strong one and prints it once on its terminal (never into a log, the status file, a
URL or a page).

    python -m specviz room --replicas 4 --port 8500 [--bind 0.0.0.0] [--status-file room.json] [--tls-cert room.pem]
    python -m specviz room --replicas 0 --backend host1:8501 --backend host2:8501 --port 80   # replicas elsewhere,
    python -m specviz replica --port 8501 --trusted-proxy BALANCER_ADDRESS                     # each started there

Plain Python: no streamlit import (the replicas are separate processes); the commands' options live in
specviz/cli/room.py and specviz/cli/replica.py.

What lives where:
- supervisor.py  Supervisor: starts the replicas (warm) and the balancer, relays their output, starts again what exits,
                 writes the status file, stops everything; Replica, threads_per_replica, default_replicas
- balancer.py    HAProxy: Backend, haproxy_config, find_haproxy, the port and TLS certificate checks, parse_backend;
                 RoomError
- worker.py      one replica on a worker (`specviz replica`): the room's cookie secret required, the trusted
                 proxies checked, the store's absence said; worker_env, exec_replica
- key.py         the presenter key handed to the replicas: the secrets files, room_presenter_key, the terminal
The processes a room starts are stopped with specviz.workshop.processes (free_port, die_with_parent, stop_processes).
"""
