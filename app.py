"""specviz entry point: page config and navigation. Each view lives in pages/ and answers one question."""

import streamlit as st

from specviz.ui.common import access, errors, page_style, timing
from specviz.ui.common.navigation import app_pages

st.set_page_config(page_title="specviz: speculative decoding, step by step", page_icon="⚡", layout="wide")
page_style.apply()  # the focus ring and tap-for-details (specviz/ui/common/page_style.py)

page = st.navigation(app_pages())  # the pages and the entry-point guard: specviz/ui/common/navigation.py
with timing.rerun(page.url_path or "step-through"):  # one `specviz.timing` line per rerun (specviz/ui/common/timing.py)
    access.mode_line()  # which mode this session is in, and why (specviz/workshop/policy.py: decide_mode)
    with errors.guard():  # an uncaught error: a message and a logged incident, no traceback in shared mode (specviz/ui/common/errors.py)
        page.run()
