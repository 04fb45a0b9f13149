"""The container image built, started and measured with podman (one row for docs/deploy.md): specviz.loadtest.container.

    python scripts/container_check.py --help

Needs the checkout installed (`pip install -e .`, which the README's test command does: requirements-dev.txt).
"""

import sys

from specviz.loadtest.container import main

if __name__ == "__main__":
    sys.exit(main())
