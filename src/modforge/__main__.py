"""``python -m modforge`` — the same as the ``modforge`` console script."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
