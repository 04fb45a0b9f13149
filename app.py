"""specviz entry point: page config and navigation. Each view lives in pages/ and answers one question."""

import streamlit as st

st.set_page_config(page_title="specviz: speculative decoding, step by step", page_icon="⚡", layout="wide")

PAGES = [
    st.Page("pages/step_through.py", title="Step through", icon="👣", default=True),
    st.Page("pages/theory.py", title="Speedup theory", icon="📐"),
    st.Page("pages/exactness.py", title="Exactness lab", icon="🎯"),
    st.Page("pages/numerics.py", title="Numerics lab", icon="🔢"),
    st.Page("pages/benchmark.py", title="Benchmark", icon="⏱️"),
]
st.navigation(PAGES).run()
