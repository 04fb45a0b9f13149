"""What a participant sees when something fails (AppTest; issue 32, item 6): an uncaught error from a page is a one-line
message with an incident id in shared mode (the traceback goes to the log, never a server path to the page) and the
owner's traceback in local mode; the next rerun works; a shared session on a real server sets Streamlit's own error
boxes to show no details; a malformed value for the Exactness lab's toy table resets it with a message; a value
Streamlit's deserializer cannot read is dropped with a message instead of breaking the session."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from specviz.ui.common import errors, widgets
from tests.test_app_shared import OWNER_ENV

APP = Path(__file__).resolve().parents[1] / "app.py"
SECRET = "/srv/secret/specviz/internals.py"


@pytest.fixture()
def mode(monkeypatch, request):
    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", request.param)
    return request.param


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter().format(record))


def shown(at: AppTest) -> str:
    """Every text the page drew, exception elements included."""
    parts = [e.value for kind in (at.error, at.warning, at.info, at.markdown, at.caption) for e in kind]
    parts += [f"{e.value} {' '.join(e.stack_trace)}" for e in at.exception]
    return " ".join(parts)


def exactness(at: AppTest | None = None) -> AppTest:
    at = at or AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page("pages/exactness.py")
    return at


@pytest.mark.parametrize("mode", ["shared", "local"], indirect=True)
def test_an_uncaught_error_is_an_incident_not_a_traceback_in_shared_mode(mode, monkeypatch):
    import specviz.ui.labs.exactness

    def broken(*args, **kwargs):
        raise RuntimeError(f"boom in {SECRET}")

    monkeypatch.setattr(specviz.ui.labs.exactness, "run_toy", broken)
    logged = Collect()
    errors.log.addHandler(logged)
    try:
        at = exactness().run()
    finally:
        errors.log.removeHandler(logged)
    incident = [e.value for e in at.error if "incident" in e.value]
    assert incident, shown(at)
    if mode == "shared":
        assert not at.exception and SECRET not in shown(at) and "Traceback" not in shown(at)
    else:
        assert at.exception and SECRET in shown(at)  # the owner sees the traceback too
    log = " ".join(logged.lines)  # the log keeps the rest, under the incident's id
    assert f"incident {incident[0].split('incident ')[1][:8]}" in log and SECRET in log
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_MODE", mode)
    at.run()  # the page recovers on the next rerun
    assert not at.exception and not [e for e in at.error if "incident" in e.value]
    assert [m for m in at.metric if m.label == "TV from p_target"]


@pytest.mark.parametrize("mode", ["shared"], indirect=True)
def test_a_shared_session_on_a_real_server_hides_streamlits_error_details(mode, monkeypatch):
    before = st.get_option(errors.OPTION)
    monkeypatch.setattr(errors, "real_server", lambda: True)
    try:
        at = exactness().run()
        assert not at.exception
        assert st.get_option(errors.OPTION) == "none"
    finally:
        st.set_option(errors.OPTION, before)


@pytest.mark.parametrize("mode", ["shared"], indirect=True)
@pytest.mark.parametrize(
    "edits",
    [
        {"edited_rows": {99: {"p_target": 1.0}}, "added_rows": [], "deleted_rows": []},  # IndexError before
        {"edited_rows": {0: {"no such column": 1.0}}, "added_rows": [], "deleted_rows": []},  # KeyError before
        {"edited_rows": {}, "added_rows": [], "deleted_rows": [42]},
        {"edited_rows": {}, "added_rows": [{"token": "x"}], "deleted_rows": []},
        {"edited_rows": {0: {"token": "x" * 5000}}, "added_rows": [], "deleted_rows": []},
        {"edited_rows": {0: {"p_target": "lots"}}, "added_rows": [], "deleted_rows": []},
        {"edited_rows": [1, 2], "added_rows": [], "deleted_rows": []},
    ],
)
def test_a_malformed_toy_table_resets_to_the_default_with_a_message(mode, edits):
    at = exactness()
    at.session_state["lab_vocab"] = edits
    at.run()
    assert not at.exception, shown(at)
    assert any("toy vocabulary" in w.value and "reset" in w.value for w in at.warning), shown(at)
    assert [m for m in at.metric if m.label == "TV from p_target"]  # the lab works on the default table


@pytest.mark.parametrize("mode", ["shared"], indirect=True)
def test_a_valid_edit_of_the_toy_table_is_kept(mode):
    at = exactness()
    at.session_state["lab_vocab"] = {"edited_rows": {0: {"p_target": 0.0, "token": "le"}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception and not at.warning, shown(at)


def test_an_unreadable_widget_value_is_dropped_and_named():
    """The hook that makes a value Streamlit's deserializer cannot read count as absent (the real-server attack is in
    tests/browser/test_protocol_attacks.py): it is in place on this Streamlit, drops the value and names the widget."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    from streamlit.runtime.state.common import WidgetMetadata
    from streamlit.runtime.state.session_state import Serialized, WStates

    assert widgets.tolerate_unreadable_values()

    def deserialize(value):
        raise ValueError("not JSON")

    states = WStates()
    wid = "$$ID-0123456789abcdef-lab_vocab"
    states.set_widget_metadata(WidgetMetadata(wid, deserialize, lambda v: v, "string_value"))
    states.states[wid] = Serialized(WidgetState(id=wid, string_value="{"))
    with pytest.raises(KeyError):  # this deserializer refuses "no value" too: the widget reads as absent
        states[wid]
    assert states.get(wid) is None
    assert states.states[wid].value.WhichOneof("value") is None  # replaced in place by no value

    def default_for_nothing(value):
        if value is not None:
            raise ValueError("not JSON")
        return "the default"

    states.set_widget_metadata(WidgetMetadata(wid, default_for_nothing, lambda v: v, "string_value"))
    states.states[wid] = Serialized(WidgetState(id=wid, string_value="{"))
    assert states[wid] == "the default"  # what Streamlit's widgets do with no value
