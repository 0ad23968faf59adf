"""Restoring and replaying one subtask; job status."""
