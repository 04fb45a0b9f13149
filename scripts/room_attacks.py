"""Issue 32's attacks on a room, one at a time, with a victim stepping beside them: specviz.loadtest.attacks.run.

    python scripts/room_attacks.py --help

Needs the checkout installed (`pip install -e .`, which the README's test command does: requirements-dev.txt).
"""

import sys

from specviz.loadtest.attacks.run import main

if __name__ == "__main__":
    sys.exit(main())
