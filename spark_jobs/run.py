"""``spark-submit spark_jobs/run.py MODULE:PIPELINE --job-id ID [options]``.

The same options as ``spillway run``; the Spark master comes from spark-submit.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from spillway.spark_jobs.cli import main

    sys.exit(main(sys.argv[1:]))
