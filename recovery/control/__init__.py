"""Changing a job: savepoints (a restart with other parallelisms), live rescale, global
checkpoints and whole-job rewind to one, the upgrade check of changed operator code, and
housekeeping (a cluster's jobs and their state, resetting one, creating user topics).

May import :mod:`spillway.recovery.restore`, :mod:`spillway.recovery.observe`,
:mod:`spillway.recovery.job` and the layers below; never the subtask runtime.
"""
