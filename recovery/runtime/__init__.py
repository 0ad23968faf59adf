"""The life of one subtask: the runner that fences, restores, runs and finishes; the task
loop, the processor and the checkpointer; checkpoint cadences; the output collector;
event-time chores; dead letters; and named crash points for failure-injection tests.

May import :mod:`spillway.recovery.restore`, :mod:`spillway.recovery.observe`,
:mod:`spillway.recovery.job` and the layers below (offsets, channels).
"""
