"""The room under load (a replica killed mid-run, or --presenter / --presenter --fork): specviz.loadtest.room_load.

    python scripts/room_load_test.py --help

Needs the checkout installed (`pip install -e .`, which the README's test command does: requirements-dev.txt).
"""

import sys

from specviz.loadtest.room_load import main

if __name__ == "__main__":
    sys.exit(main())
