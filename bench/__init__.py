"""Benchmarks for Spillway. Run from the repository root, e.g. ``python -m bench.channels``.

Not part of the installed package: benchmarks measure the code in this checkout.
"""
