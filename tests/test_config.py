"""RunConfig's load options carry every safety opt-in, off by default, and the CLI flags reach them."""

from specviz.cli import build_parser, config_from_args
from specviz.config import RunConfig


def test_load_options_are_safe_by_default():
    opts = RunConfig().load_options()
    assert opts == dict(device="auto", dtype="auto", trust_remote_code=False, allow_download=False, allow_pickle=False)


def test_cli_opt_ins_reach_the_load_options():
    args = build_parser().parse_args(
        ["generate", "--prompt", "hi", "--allow-pickle", "--allow-download", "--trust-remote-code", "--device", "cpu"]
    )
    opts = config_from_args(args).load_options()
    assert opts["allow_pickle"] and opts["allow_download"] and opts["trust_remote_code"]
    assert opts["device"] == "cpu"
