"""Detectors (scoring only) and the decision policy."""
