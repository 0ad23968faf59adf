"""Checkpoint records and offset bookkeeping."""
