"""`python -m kmigrate.claims`: the claims CLI (`kmigrate.claims.cli`)."""
from __future__ import annotations

import sys

from kmigrate.claims.cli import main

if __name__ == "__main__":  # imported (as the layout test imports every module), it runs nothing
    sys.exit(main())
