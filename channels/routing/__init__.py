"""Where a record goes: partitioners (forward, key hash, round-robin, broadcast), key
groups and partition ownership, and their vectorised twins over whole Arrow batches.

Pure bookkeeping, no I/O. May import the root of :mod:`spillway.channels` (errors, ids).
"""
