"""Two services: one prompt through plain and speculative decoding, played back on one clock; a probe for real services;
and the room exercise "Which service speculates?"."""

import streamlit as st

from specviz.ui.common.navigation import route_through_app
from specviz.ui.labs import exercise, probe, race
from specviz.ui.room.lesson import checklist

route_through_app()  # a fresh server's first request may land here without app.py

settings = race.settings()
st.title("Two services, one text")
st.caption(
    "The same model can answer two to three times faster on one service than on another, with the same text: the fast one "
    "speculates. Race plain decoding against speculative decoding on your prompt, each alone on the model, then watch both "
    "answers arrive on one clock, at the speed each was measured."
)
checklist(__file__)  # this page's lesson task, if any (docs/lesson-45min.md)
race.race_section(settings)
probe.probe_section(settings)
exercise.exercise_section()
exercise.watch()  # reruns the page when the presenter shows a race or the exercise moves on
