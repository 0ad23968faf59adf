"""Example pipelines shipped with Spillway."""
