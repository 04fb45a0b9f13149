"""The app's pages, registered once for st.navigation, and the guard that makes each page's URL an entry point.

Why the guard: Streamlit 1.67 decides per process, when the first session starts, whether the app uses the legacy
pages/ folder (PagesManager.uses_pages_directory = "is there a pages/ next to app.py"). While that flag is set, a
request does not run app.py: Streamlit builds a navigation of app.py plus every file in pages/ (labelled from the
file names: app, benchmark, exactness, step through, theory) and runs the requested file alone. Only an executed
st.navigation clears the flag (for every session, as its docs say). A fresh server whose first request is "/" runs
app.py, which calls st.navigation; one whose first request is "/theory" ran pages/theory.py without app.py. So each
page starts with route_through_app(): under legacy routing it registers our navigation (clearing the flag) and
reruns, and the rerun goes through app.py like every later request."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from streamlit.errors import StreamlitAPIException

from specviz.ui.common import st_internals


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to app.py
    title: str
    icon: str
    default: bool = False


PAGE_SPECS: tuple[PageSpec, ...] = (
    PageSpec("pages/step_through.py", "Step through", "👣", default=True),
    PageSpec("pages/theory.py", "Speedup theory", "📐"),
    PageSpec("pages/exactness.py", "Exactness lab", "🎯"),
    PageSpec("pages/numerics.py", "Numerics lab", "🔢"),
    PageSpec("pages/benchmark.py", "Benchmark", "⏱️"),
    PageSpec("pages/race.py", "Two services", "🏁"),
)


def app_pages() -> list:
    """The st.Page objects for st.navigation (built per run: Page objects belong to one script run)."""
    return [st.Page(p.path, title=p.title, icon=p.icon, default=p.default) for p in PAGE_SPECS]


def legacy_routing() -> bool:
    """True while Streamlit still routes by the pages/ folder (a fresh server, no st.navigation run yet).

    Reads Streamlit's own flag; a version without it has no legacy routing to work around."""
    return st_internals.uses_pages_directory()


def route_through_app() -> None:
    """Call first thing in every page: if Streamlit ran this file directly through its legacy pages/ routing,
    register the app's navigation (which switches the legacy routing off for good) and rerun through app.py."""
    if not legacy_routing():
        return
    st.navigation(app_pages(), position="hidden")  # resolves the requested page, so the rerun keeps the URL
    st.rerun()


def page_link(path: str, label: str) -> None:
    """A link to another page of the app that keeps this browser session (st.page_link); where that page is not
    registered (a page script run on its own, as AppTest runs it), the same words pointing to the menu."""
    spec = next(p for p in PAGE_SPECS if p.path == path)
    try:
        st.page_link(path, label=label, icon=spec.icon)
    except StreamlitAPIException:
        st.caption(f"{label}: {spec.title} in the page menu.")
