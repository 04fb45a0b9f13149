"""The deployment files agree with each other and with the app, without building anything (tests/test_container.py
builds and runs the image): compose.yaml's room command is one the CLI accepts, on the port and volume the Dockerfile
declares; the files that hold a presenter key or secrets never reach the image or the repository."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specviz.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
COMPOSE_TEXT = (REPO / "compose.yaml").read_text(encoding="utf-8")
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
ROOM = COMPOSE["services"]["room"]


def dockerfile_env(name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", DOCKERFILE)
    assert found, f"the Dockerfile sets no {name}"
    return found.group(1)


def ignored(pattern_file: str, path: str) -> bool:
    patterns = [line.strip().lstrip("/").rstrip("/") for line in (REPO / pattern_file).read_text().splitlines() if line.strip() and not line.startswith("#")]
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(Path(path).name, p) for p in patterns)


def test_the_rooms_command_is_one_the_cli_accepts_on_the_images_port():
    command = ROOM["command"]
    assert command[:3] == ["python", "-m", "specviz"]
    args = build_parser().parse_args(command[3:])
    assert args.command == "room" and args.bind == "0.0.0.0"
    port = dockerfile_env("PORT")
    assert re.search(rf"^EXPOSE {port}$", DOCKERFILE, re.M)
    assert str(args.port) == port and any(str(p).endswith(f":{port}") for p in ROOM["ports"])


def test_runs_go_to_the_volume():
    run_dir = dockerfile_env("SPECVIZ_RUN_DIR")
    mounts = [v.split(":")[1] for v in ROOM["volumes"]]
    assert any(run_dir.startswith(m.rstrip("/") + "/") for m in mounts), (run_dir, mounts)
    assert re.search(r'^VOLUME \["/data"\]$', DOCKERFILE, re.M) and run_dir.startswith("/data/")


def test_the_image_starts_in_shared_mode_as_a_non_root_user():
    assert dockerfile_env("SPECVIZ_MODE") == "shared"
    user = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0")


def test_keys_and_secrets_stay_out_of_the_image_and_the_repository():
    for env_file in ROOM["env_file"]:
        assert ignored(".dockerignore", env_file) and ignored(".gitignore", env_file), env_file
    assert ignored(".dockerignore", ".streamlit/secrets.toml") and ignored(".dockerignore", ".env")
    for made_by_a_recipe in ("secrets.toml", ".streamlit/secrets.toml", "room.pem", "key.pem", "certs/cert.pem"):  # docs/deploy.md, docs/rooms.md
        assert ignored(".dockerignore", made_by_a_recipe) and ignored(".gitignore", made_by_a_recipe), made_by_a_recipe
    assert not ignored(".dockerignore", "specviz/models/loading.py")  # a known-good path: the matcher is not vacuous


def test_the_container_has_a_memory_limit_the_budget_is_cut_from():
    limit = str(ROOM.get("mem_limit", ""))
    assert re.fullmatch(r"\d+[mg]", limit), "compose.yaml sets no memory limit: the replicas' budgets would be cut from the host's RAM"
    assert int(limit[:-1]) * (2**10 if limit.endswith("g") else 1) >= 3 * 2**10  # room for two replicas and their models


# --- the profile `room`: separate containers that share nothing but Redis (issue 46, item 3) -----------------------

PROFILE = {name: service for name, service in COMPOSE["services"].items() if "room" in service.get("profiles", [])}


def command(service: dict):
    assert service["command"][:3] == ["python", "-m", "specviz"], service["command"]
    return build_parser().parse_args(service["command"][3:])


def test_the_room_profile_is_redis_a_balancer_and_replicas_that_share_no_volume():
    assert "room" not in ROOM.get("profiles", [])  # `docker compose up -d` still starts the one-container room
    redis = PROFILE["redis"]
    assert redis["image"].startswith("redis:7") and "--appendonly" in redis["command"]
    replicas = {name: s for name, s in PROFILE.items() if name != "redis" and command(s).command == "replica"}
    assert len(replicas) >= 2, list(PROFILE)
    balancer = PROFILE["balancer"]
    args = command(balancer)
    assert args.command == "room" and args.replicas == 0 and args.bind == "0.0.0.0"
    assert sorted(args.backend) == sorted(f"{name}:{command(s).port}" for name, s in replicas.items())  # every replica, only them
    port = dockerfile_env("PORT")
    assert str(args.port) == port and any(str(p).endswith(f":{port}") for p in balancer["ports"])
    balancer_ip = balancer["networks"]["room"]["ipv4_address"]
    for name, service in replicas.items():
        assert not service.get("volumes"), f"{name} mounts a volume: a room's replicas share nothing but Redis"
        assert service["environment"]["SPECVIZ_STORE"] == "redis://redis:6379/0" and "redis" in service["depends_on"]
        assert command(service).trusted_proxy == [balancer_ip]  # the balancer's X-Forwarded-For, nobody else's
        assert service["env_file"] == ROOM["env_file"] and "ports" not in service  # reached through the balancer only
    for name, service in PROFILE.items():
        assert re.fullmatch(r"\d+[mg]", str(service.get("mem_limit", ""))), f"{name} has no memory limit"


def test_the_kubernetes_sketch_parses_and_its_commands_are_the_clis():
    """docs/k8s-room.yaml is a sketch, never applied to a cluster; this is all that is checked of it."""
    text = (REPO / "docs" / "k8s-room.yaml").read_text(encoding="utf-8")
    assert text.startswith("# A SKETCH, NOT A TESTED DEPLOYMENT")
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}
    pod = docs[("Deployment", "specviz-replica")]["spec"]["template"]["spec"]
    (replica,) = pod["containers"]
    args = command(replica)
    assert args.command == "replica" and args.trusted_proxy and "volumes" not in pod and "volumeMounts" not in replica
    assert replica["readinessProbe"]["httpGet"] == {"path": "/_stcore/health", "port": args.port}
    assert {"name": "SPECVIZ_STORE", "value": "redis://specviz-redis:6379/0"} in replica["env"] and replica["resources"]["limits"]["memory"]
    assert ("Service", "specviz-redis") in docs and docs[("Deployment", "specviz-redis")]["spec"]["template"]["spec"]["containers"][0]["image"].startswith("redis:7")
    assert docs[("Ingress", "specviz-room")]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed (scripts/test.sh installs Debian's)")
def test_compose_validates_the_file(tmp_path):
    """docker-compose's own schema check (Debian's 1.29), on a copy beside an empty specviz.env; the known-bad control:
    a misspelt key is refused."""
    for text, ok in ((COMPOSE_TEXT, True), (COMPOSE_TEXT.replace("mem_limit:", "mem_limt:", 1), False)):
        (tmp_path / "compose.yaml").write_text(text, encoding="utf-8")
        (tmp_path / "specviz.env").write_text("", encoding="utf-8")
        done = subprocess.run(["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"], capture_output=True, text=True, timeout=60)
        assert (done.returncode == 0) == ok, done.stderr
