"""What a workload may use: CPUs, processes, files, the interval core (README.md, Layout)."""
