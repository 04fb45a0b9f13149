"""The deployment files agree with each other and with the app, without building anything (tests/test_container.py
builds and runs the image): compose.yaml's room command is one the CLI accepts, on the port and volume the Dockerfile
declares; the files that hold a presenter key or secrets never reach the image or the repository."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import yaml

from specviz.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
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
