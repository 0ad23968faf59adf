"""bench.winmeasure.TreeCpu counts a child that exits unwaited-for (as PySpark's daemon's
workers do); summing the live tree's own and children's time would lose it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bench import procstat
from bench.winmeasure import TreeCpu

# The parent ignores SIGCHLD (as pyspark/daemon.py), forks a child that burns 0.5 s of
# CPU, idles a second (so the sampler sees its final time) and exits; the kernel reaps it
# without adding its time to the parent's cutime.
PARENT = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("go", flush=True)
    sys.stdin.readline()
    pid = os.fork()
    if pid == 0:
        while time.process_time() < 0.5:
            pass
        time.sleep(1.0)
        os._exit(0)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    print("done", flush=True)
    sys.stdin.readline()
    """
)


def test_tree_cpu_counts_a_child_reaped_without_wait() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "go"
        naive0 = procstat.cpu_seconds(procstat.read_tree(proc.pid))
        tree = TreeCpu(proc.pid, every_s=0.05)
        tree.start()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        counted = tree.stop()
        naive = procstat.cpu_seconds(procstat.read_tree(proc.pid)) - naive0
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The child's burn, seen at its last sample (/proc counts in clock ticks: a few less).
    assert counted >= 0.45
    assert naive < 0.25  # what the live tree alone says: the child's time is gone
    assert tree.peak_rss > 0
