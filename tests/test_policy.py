"""The owner's rules (specviz.workshop.policy): where they come from, which mode a server is in, what enforce() refuses."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.config import EMBEDDED_TARGET, MAX_NEW_TOKENS, MAX_PROMPT_CHARS, RunConfig
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.workshop.policy import Policy, is_local_address, load_policy


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1", "::1", "", None])
def test_localhost_is_the_owners_laptop(address):
    policy = load_policy(env={}, server_address=address)
    assert not policy.shared and policy.allow_remote_code and policy.allow_custom_models
    assert policy.max_new_tokens == MAX_NEW_TOKENS and policy.max_draft_tokens == MAX_DRAFT_TOKENS
    assert policy.max_prompt_chars == MAX_PROMPT_CHARS
    assert is_local_address(address)


@pytest.mark.parametrize("address", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_any_other_address_is_shared_and_safe(address):
    policy = load_policy(env={}, server_address=address)
    assert policy.shared
    assert not (policy.allow_remote_code or policy.allow_pickle or policy.allow_download or policy.allow_custom_models or policy.allow_device)
    assert policy.targets == (EMBEDDED_TARGET,) and policy.drafts == ()
    assert policy.max_new_tokens < MAX_NEW_TOKENS
    assert policy.max_prompt_chars == 2_000 < MAX_PROMPT_CHARS


def test_the_owner_sets_the_prompt_cap():
    assert load_policy(env={"SPECVIZ_MAX_PROMPT_CHARS": "500"}, server_address="0.0.0.0").max_prompt_chars == 500
    assert load_policy(secrets={"max_prompt_chars": 300}, server_address="0.0.0.0").max_prompt_chars == 300
    assert Policy(max_prompt_chars=100).cap(4_000, "max_prompt_chars", "The prompt's length")[0] == 100


def test_owner_can_say_local_on_a_public_address_and_shared_on_localhost():
    assert not load_policy(env={"SPECVIZ_MODE": "local"}, server_address="0.0.0.0").shared
    assert load_policy(env={"SPECVIZ_MODE": "shared"}, server_address="localhost").shared


def test_environment_beats_secrets_and_lists_are_parsed():
    env = {"SPECVIZ_ALLOW_PICKLE": "yes", "SPECVIZ_TARGETS": " a , b,a ", "SPECVIZ_MAX_NEW_TOKENS": "32"}
    secrets = {"allow_pickle": False, "allow_download": True, "drafts": ["d1", "d2"], "max_new_tokens": 999, "mode": "shared"}
    policy = load_policy(env=env, secrets=secrets, server_address="localhost")
    assert policy.shared and policy.allow_pickle and policy.allow_download and not policy.allow_remote_code
    assert policy.targets == ("a", "b") and policy.drafts == ("d1", "d2") and policy.max_new_tokens == 32


@pytest.mark.parametrize(
    "env, secrets, words",
    [
        ({"SPECVIZ_ALLOW_PICKLE": "maybe"}, {}, "SPECVIZ_ALLOW_PICKLE"),
        ({"SPECVIZ_MAX_NEW_TOKENS": "lots"}, {}, "SPECVIZ_MAX_NEW_TOKENS"),
        ({"SPECVIZ_MAX_NEW_TOKENS": "0"}, {}, "between 1"),
        ({"SPECVIZ_MAX_PROMPT_CHARS": "100000"}, {}, "SPECVIZ_MAX_PROMPT_CHARS"),
        ({"SPECVIZ_MODE": "public"}, {}, "'shared' or 'local'"),
        ({"SPECVIZ_TARGETS": " , "}, {}, "allow-list"),
        ({}, {"allow_everything": True}, "allow_everything"),
    ],
)
def test_bad_settings_say_which_one(env, secrets, words):
    with pytest.raises(ValueError, match=words):
        load_policy(env=env, secrets=secrets, server_address="0.0.0.0")


def test_enforce_refuses_the_risky_and_caps_the_big():
    config = RunConfig(
        target="/etc/passwd", draft="evil/model", drafter="model", trust_remote_code=True, allow_pickle=True, allow_download=True,
        device="cpu", dtype="float16", max_new_tokens=2048, num_draft_tokens=16,
    )
    safe, refusals, limits = Policy().enforce(config)
    assert safe.target == EMBEDDED_TARGET and safe.draft is None and safe.drafter == RunConfig().drafter
    assert not (safe.trust_remote_code or safe.allow_pickle or safe.allow_download)
    assert (safe.device, safe.dtype) == ("auto", "auto")
    assert safe.max_new_tokens == 256 and safe.num_draft_tokens == 8
    assert len(refusals) == 6 and len(limits) == 2
    assert any("/etc/passwd" in r for r in refusals) and any("trust remote code" in r for r in refusals)


def test_enforce_keeps_what_the_owner_allowed():
    policy = Policy(allow_remote_code=True, targets=(EMBEDDED_TARGET, "/models/big"), drafts=("/models/small",), max_new_tokens=64)
    config = RunConfig(target="/models/big", draft="/models/small", drafter="model", trust_remote_code=True, max_new_tokens=64)
    assert policy.enforce(config) == (dataclasses.replace(config, max_draft_tokens=policy.max_draft_tokens), [], [])  # adaptive k's ceiling: quietly the cap
    assert policy.enforce(policy.enforce(config)[0])[0] == policy.enforce(config)[0]
    assert Policy.local().enforce(RunConfig(target="/anything", trust_remote_code=True, max_new_tokens=2048)) [1:] == ([], [])


def test_cap_and_concurrency():
    policy = Policy(max_samples=1000)
    assert policy.cap(5000, "max_samples", "samples N") == (1000, "samples N is limited to 1,000 on this server (asked for 5,000).")
    assert policy.cap(10, "max_samples", "samples N") == (10, None)
    assert Policy().concurrency("cpu") == 1 and Policy().concurrency("cuda") == 2 and Policy(max_concurrent=3).concurrency("cpu") == 3


def documented_rows(text: str) -> dict[str, list[str]]:
    """docs/workshop.md's table of owner settings: environment variable -> its cells (key, shared default, meaning)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `SPECVIZ_"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows[cells[0].strip("`")] = [cells[1].strip("`"), *cells[2:]]
    return rows


def disagreements(rows: dict[str, list[str]]) -> list[str]:
    """'VARIABLE: what' for each place the docs' table and the policy's own (OWNER_SETTINGS) differ. Local mode's value
    is checked for the numbers (the bools are 'every option' in local mode, said once above the table)."""
    import re

    from specviz.workshop.policy import OWNER_SETTINGS, PRESENTER_KEY

    out = [f"{env}: not in the policy's table" for env in set(rows) - {r.env for r in (*OWNER_SETTINGS, PRESENTER_KEY)}]
    for r in (*OWNER_SETTINGS, PRESENTER_KEY):
        if r.env not in rows:
            out.append(f"{r.env}: not documented")
            continue
        key, default = rows[r.env][:2]
        if key != r.name:
            out.append(f"{r.env}: key {key!r}, the policy's is {r.name!r}")
        if not re.match(rf"{re.escape(r.default_words)}\b", default):
            out.append(f"{r.env}: default {default!r}, the policy's is {r.default_words!r}")
        if r.kind in ("int", "float") and r.local_words and not re.search(rf"\b{re.escape(r.local_words)}\b[^()]*in local mode", default):
            out.append(f"{r.env}: local mode's {r.local_words} not said")
    return sorted(out)


def test_the_documented_owner_settings_are_the_policys_defaults_included():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "workshop.md").read_text(encoding="utf-8")
    rows = documented_rows(text)
    assert len(rows) >= 20 and disagreements(rows) == []
    # known-bad controls: a wrong default, an unsaid local value, a wrong key, a row missing
    bad = dict(rows) | {"SPECVIZ_MAX_RUNS": ["max_runs", "60 (200 in local mode)"], "SPECVIZ_MAX_SAMPLES": ["max_samples", "100,000"],
                        "SPECVIZ_DRAFTS": ["draft", "none"]}  # fmt: skip
    del bad["SPECVIZ_IDLE_MINUTES"]
    assert disagreements(bad) == [
        "SPECVIZ_DRAFTS: key 'draft', the policy's is 'drafts'", "SPECVIZ_IDLE_MINUTES: not documented",
        "SPECVIZ_MAX_RUNS: default '60 (200 in local mode)', the policy's is '50'", "SPECVIZ_MAX_SAMPLES: local mode's 1,000,000 not said",
    ]  # fmt: skip


def test_the_policy_reads_its_defaults_ranges_and_variables_from_its_rows():
    from specviz.workshop.policy import OWNER_SETTINGS, SETTINGS, limit_ranges

    policy, local = Policy(), Policy.local()
    for r in OWNER_SETTINGS[1:]:  # each Policy field's row: its default is the field's, its variable reaches it
        assert getattr(policy, r.name) == r.default, r.name
        if r.local is not None:
            assert getattr(local, r.name) != r.default, r.name
    for name, (low, high) in limit_ranges().items():
        row = SETTINGS[name]
        with pytest.raises(ValueError, match=f"{row.env} \\(or {name} in secrets.toml\\) must be between"):
            Policy(**{name: int(low) - 1 if row.kind == "int" else low - 0.5})
        assert getattr(load_policy(env={row.env: str(int(high))}, server_address="0.0.0.0"), name) == high
    assert SETTINGS["max_draft_tokens"].high == MAX_DRAFT_TOKENS and SETTINGS["max_new_tokens"].high == MAX_NEW_TOKENS  # RunConfig's ranges
