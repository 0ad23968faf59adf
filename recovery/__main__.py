"""``python -m recovery replay|status ...``."""

import sys

from recovery.cli import main

sys.exit(main())
