"""What a run shows others: the report, figures, archives, comparisons (README.md, Layout)."""
