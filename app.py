"""specviz entry point: page config and navigation. Each view lives in pages/."""

import streamlit as st

st.set_page_config(page_title="specviz: speculative decoding, step by step", page_icon="⚡", layout="wide")
st.title("specviz")
st.write("Speculative decoding, step by step. The pages arrive with the next issues.")
