"""The step-through page's parts (pages/step_through.py): the sidebar's settings, the session and its runs, the
controls, replay of recordings, and the views (token stream, inspector, metrics, tree, export)."""
