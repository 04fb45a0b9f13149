"""Session-state keys shared between pages: one page writes, another may read (st.session_state is per browser session)."""

BENCH_RESULTS_KEY = "bench_results"  # pages/benchmark.py keeps its latest results DataFrame here; pages/theory.py draws it
STEP_THROUGH_KEY = "specviz_step_through"  # specviz.ui.step_through.session keeps the step-through page's PageState here; access frees it
PRESENTING_KEY = "specviz_presenting"  # specviz.ui.room.present: (presentation id, holder) this session presents; access spares its run
