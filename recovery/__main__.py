"""``python -m recovery replay|status ...``."""

import sys

from spillway.recovery.cli import main

sys.exit(main())
