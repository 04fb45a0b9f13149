"""The only streamlit code outside app.py and pages/: cached loaders, session-state keys, widgets -> config."""
