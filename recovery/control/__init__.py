"""Changing a job: savepoints (a restart with other parallelisms), live rescale, global
checkpoints and whole-job rewind to one, and the upgrade check of changed operator code.

May import :mod:`spillway.recovery.restore`, :mod:`spillway.recovery.observe`,
:mod:`spillway.recovery.job` and the layers below; never the subtask runtime.
"""
