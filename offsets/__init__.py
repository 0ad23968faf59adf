"""Checkpoint records and offset bookkeeping: the per-subtask checkpoint record, the
checkpoint store (one topic per operator, partition = subtask index) and the pure rule that
positions only move forward.

May import :mod:`spillway.channels`; nothing above it.
"""
