"""Results into estimates and verdicts: the statistics and the tables (README.md, Layout)."""
