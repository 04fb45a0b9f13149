"""Issue 32's attacks on a room (specviz.loadtest.attacks.run: the command line, scripts/room_attacks.py)."""
