"""Recovering, running and changing subtasks: everything a subtask does between its fence
and its final checkpoint, and everything that changes or watches a job from outside.

Rooms, from the bottom: :mod:`~spillway.recovery.job` (the compiled plan),
:mod:`~spillway.recovery.observe` (events, heartbeats, status, metrics),
:mod:`~spillway.recovery.restore` (state and restore), :mod:`~spillway.recovery.runtime`
(the subtask's loop) and :mod:`~spillway.recovery.control` (savepoints, rescale, rewind).
At the root: ``replay`` (one subtask by hand, outside Spark) and the ``replay``/``status``
command line. May import :mod:`spillway.offsets` and :mod:`spillway.channels`; never Spark.
"""
