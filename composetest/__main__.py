"""``python -m composetest``: see :mod:`composetest.run`."""

import sys

from composetest.run import main

sys.exit(main(sys.argv[1:]))
