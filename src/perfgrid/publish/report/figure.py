"""The claims figure: every claim's interval against its threshold, coloured by verdict."""

from __future__ import annotations

from pathlib import Path

from perfgrid.analyse.analysis import DPI, Claim, cropped, literal

#: each verdict's colour in a figure (the report's claims figure, the gallery's forest plots)
VERDICT_COLOURS = {"reproduced": "tab:green", "not reproduced": "tab:red",
                   "at the threshold": "tab:blue", "inconclusive": "tab:orange"}


def claims_figure(claims: list[Claim], path: Path) -> Path:
    """Every claim's interval against its threshold, coloured by verdict (PNG and SVG).

    The axis is the measured quantity over its threshold, turned so that right of
    1 means the claim holds, so claims of every unit share one axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colours = VERDICT_COLOURS
    fig, ax = plt.subplots(figsize=(8, 0.28 * max(len(claims), 1) + 1.4))
    labels = []
    for i, claim in enumerate(reversed(claims)):
        labels.append(literal(f"{claim.experiment} [{claim.runtime}] {claim.hypothesis}"[:80]))
        if not (np.isfinite(claim.value) and np.isfinite(claim.threshold) and claim.threshold):
            ax.text(1.0, i, "no estimate", fontsize=6, va="center", ha="center", color="0.4")
            continue
        flip = claim.op.startswith("<")
        xs = [v / claim.threshold for v in (claim.value, claim.ci_low, claim.ci_high)]
        if flip:  # a lower end of 0 (a count of none: a one-sided bound) turns unbounded
            xs = [1 / x if x else (np.inf if x == 0 else np.nan) for x in xs]
        colour = colours[claim.verdict]
        ends = sorted(xs[1:])
        if np.isfinite(ends[0]) and np.isposinf(ends[1]) and np.isfinite(xs[0]):  # one-sided
            end = max(xs[0], ends[0]) * 1.5
            ax.plot([ends[0], end], [i, i], color=colour, lw=2.5)
            ax.plot(end, i, ">", color=colour, ms=4)
            ax.plot(xs[0], i, "o", color=colour, ms=4)
        elif np.isfinite(xs[1]) and np.isfinite(xs[2]):
            ax.plot([min(xs[1:]), max(xs[1:])], [i, i], color=colour, lw=2.5)
            ax.plot(xs[0], i, "o", color=colour, ms=4)
        else:
            ax.plot(xs[0], i, "o", mfc="white", color=colour, ms=5)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("measured / threshold, right of 1: the claim holds\n"
                  "bar: the claim's interval at its level (the claims table's, 95 % by "
                  "default; arrow: one-sided, unbounded); hollow dot: no interval",
                  fontsize=8)
    handles = [plt.Line2D([], [], color=c, lw=2.5, label=v) for v, c in colours.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    box = cropped(fig)
    fig.savefig(path, dpi=DPI, bbox_inches=box)
    fig.savefig(path.with_suffix(".svg"), dpi=DPI, bbox_inches=box)
    plt.close(fig)
    return path
