"""The comparison: the one judge of two runs, its decisions and report."""
