"""The chaos suite: a keyed pipeline under injected faults, checked exactly."""
