"""What a benchmark job runs: the harness, a claim block, counters, noise (README.md, Layout)."""
