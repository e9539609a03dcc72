"""Helpers every stage may use: name registries, lock files on shared filesystems, atomic writes,
token padding, peak-memory readings."""
