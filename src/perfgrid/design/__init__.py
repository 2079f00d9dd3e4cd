"""The run's design: the grid, the order, the plan and each job's code (README.md, Layout)."""
