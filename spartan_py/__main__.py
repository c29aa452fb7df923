"""``python -m spartan_py``: the same command line as ``spartan``."""

import sys

from spartan_py.cli import main

sys.exit(main())
