"""``python -m spillway``: the ``spillway`` command."""

import sys

from spillway.cli import main

sys.exit(main())
