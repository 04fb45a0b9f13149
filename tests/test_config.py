"""RunConfig's load options carry every safety opt-in, off by default, and the CLI flags reach them."""

import pytest

from specviz.cli import build_parser
from specviz.cli.options import config_from_args
from specviz.config import DRAFTER_KINDS, RunConfig, field_named


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


def test_a_plain_file_is_refused_with_what_to_give_instead(tmp_path):
    import pytest

    from specviz.models import ModelLoadError, load_model

    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    with pytest.raises(ModelLoadError, match="is a file, not a model"):
        load_model(str(notes), "cpu", "float32")


def test_the_drafter_kinds_are_listed_once_in_the_drafter_table():
    """RunConfig.drafter's type is DrafterKind, a str checked against DRAFTERS at run time: no Literal beside the table
    to drift from it (a kind added to DRAFTERS is a run's drafter at once), and the field's choices are the table's."""
    import typing

    from specviz.drafters.specs import DRAFTERS, DrafterKind

    hint = typing.get_type_hints(RunConfig)["drafter"]
    assert hint is DrafterKind is str and not typing.get_args(hint)
    assert field_named("drafter").choices == DRAFTER_KINDS == tuple(d.kind for d in DRAFTERS)
    with pytest.raises(ValueError, match="Unknown drafter 'nope'"):
        RunConfig(drafter="nope")
