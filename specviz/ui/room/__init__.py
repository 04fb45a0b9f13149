"""The room: a teacher presents a run (present), participants follow it (follow) and fork it (fork), the board
gathers everyone's runs (board), the server redraws followers' pages (push), setups travel by link (share) and runs
survive a restart (saved_runs). The plain logic is specviz.workshop; these modules are the pages' side."""
