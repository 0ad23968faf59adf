"""``python -m spillway``: the ``spillway`` command."""

import sys

from spark_jobs.cli import main

sys.exit(main())
