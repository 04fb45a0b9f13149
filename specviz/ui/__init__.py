"""The only streamlit code outside app.py and pages/, by feature: step_through/ (the step-through page), labs/ (one
module per lab page), room/ (present, follow, fork, board, push, share, saved runs), common/ (what every page shares)."""
