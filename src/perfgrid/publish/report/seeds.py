"""The seeds' figures beside this machine's, row by row."""

from __future__ import annotations

import pandas as pd


def seed_comparison(seed_rows: list[dict], table: pd.DataFrame,
                    axes: tuple[str, ...]) -> pd.DataFrame:
    """Each seed row beside the best matching row of this machine, by runtime.

    A seed row's ``<runtime>_variant`` (e.g. ``erlang_variant: erlang_read``)
    names the variant that runtime's rows carry, where it differs from the
    seed row's own ``variant``.
    """
    out = []
    for seed in seed_rows:
        keys = [k for k in axes if k in seed and k in table]
        row = {**{k: seed[k] for k in keys}, "seed_runtime": seed.get("runtime", ""),
               "seed_rate": seed["rate"]}
        for runtime in ("python", "native", "erlang"):
            wanted = {**seed, "variant": seed.get(f"{runtime}_variant", seed.get("variant"))}
            match = table
            for key in keys:
                match = match[match[key] == wanted[key]]
            found = match[match["runtime"] == runtime]
            rate = float(found["rate"].max()) if not found.empty else float("nan")
            row[f"{runtime}_rate"] = rate
        here = row.get(f"{seed.get('runtime', '')}_rate", float("nan"))
        if pd.isna(here):
            here = row["python_rate"]
        row["here_over_seed"] = here / seed["rate"] if pd.notna(here) else float("nan")
        out.append(row)
    frame = pd.DataFrame(out)
    return frame.dropna(axis=1, how="all")
