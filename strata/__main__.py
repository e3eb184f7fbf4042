"""``python -m strata``: the same entry point as the ``strata`` console script."""

from __future__ import annotations

import sys

from strata.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
