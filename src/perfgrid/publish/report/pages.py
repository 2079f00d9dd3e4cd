"""The report's two pages, Markdown and HTML, from the templates; and :func:`html_page`,
the one way perfgrid writes HTML (the report, compare, the gallery)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from perfgrid.kit.paths import PACKAGE
from perfgrid.publish.report.claims import CLAIM_COLUMNS, verdict_counts
from perfgrid.publish.report.formatting import md_table
from perfgrid.publish.report.quality import uncounted_points
from perfgrid.publish.report.run_facts import noise_table, topology_table

PRECISION_TEXT = ("Precision: points with a 95 % interval, those whose half-width is at most "
                  "3 % of the rate, and, where measure.target_ci is set, the points whose "
                  "interval met the target before the cap (measure.max_seconds) stopped them.")
VERDICT_TEXT = (
    "Every claim is in the claims ledger (claims.yaml in each experiment's folder): its kind "
    "(seed: the seed post makes it; project: this project's own; sanity: it holds by "
    "construction and checks the harness, so it is shown but not counted), the seed's "
    "figure and where it is, the threshold this project judges against and why it differs "
    "from the seed's figure, and an equivalence margin fixed before the data it judges "
    "(the ledger's history names any change made after runs were in view). A claim reads "
    "at the threshold when its {eq:.0%} interval lies wholly within its margin of the "
    "threshold (two one-sided tests, each at {tail:.1%}); this comes first, so a truth near "
    "the threshold reads the same on the next run. Otherwise it is reproduced or not "
    "reproduced when its interval (level in the claims table, {level:.0%}) lies wholly on "
    "one side of the threshold, inconclusive when it straddles "
    "it. An \"about\" claim (op ~) is reproduced when its {eq:.0%} interval lies within the "
    "margin, not reproduced when its interval lies wholly outside it. {between} "
    "A ratio of two points measured in the same rounds is paired round "
    "by round (drift both sides share cancels), and a best-of or a median over rows takes "
    "the rows' intervals at levels that hold for all of them at once (\"simultaneous "
    "bounds\"). Why: the kernel counters (perf stat, in an untimed pass after the timed "
    "runs) of the points a claim compares, per unit of work; where none was counted, why "
    "not when the counting pass could not run (perf missing, not permitted), else empty.")


def _cut_words(cut: int, over: dict[str, float] | None) -> str:
    """The mark of a run an earlier perfgrid cut (its design not measured in full), and of
    a run that took longer than its time budget (measured in full, but slow)."""
    words = ""
    if cut:
        words += (f"THIS RUN WAS CUT: an earlier perfgrid let {cut} point rounds go (looks or "
                  f"its time budget), so its verdicts rest on fewer rounds than the design. ")
    if over:
        words += (f"THIS RUN TOOK LONGER THAN ITS TIME BUDGET: its benchmarks ended "
                  f"{over['minutes']:.0f} min after it started, past budget.minutes "
                  f"({over['budget']:g}). Nothing was cut: every round of the design was "
                  f"measured, but a machine this slow is busier or smaller than the one the "
                  f"design was sized for. ")
    return words


def verdict_text(claims: pd.DataFrame) -> str:
    """How the verdicts were reached, with the levels and the between-run component that
    this run's claims used (perfgrid.analyse.betweenrun)."""
    from perfgrid.analyse import betweenrun
    from perfgrid.analyse.stats import LEVEL, equivalence_level

    return VERDICT_TEXT.format(eq=equivalence_level(LEVEL), tail=(1 - LEVEL) / 2, level=LEVEL,
                               between=betweenrun.describe(claims))


TEMPLATES = PACKAGE / "templates"
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;font-size:.85em;margin:1em 0}td,th{border:1px solid
#ccc;padding:.2em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}
.reproduced{background:#dfd}.not{background:#fdd}.inconclusive{background:#ffd}
.at{background:#ddf}.scroll{overflow-x:auto;max-width:100%}pre{overflow-x:auto}
p,li{overflow-wrap:break-word}"""


def view(data: dict[str, Any]) -> dict[str, Any]:
    """What both templates show, in the order they show it: :func:`build`'s data with the
    topology sentence, the verdict counts and each section's problem tables worked out."""
    topology_text, topology = topology_table(data["machine"])
    noise_text, noise_frame = noise_table(data.get("noise"))
    sections = []
    for sec in data["sections"]:
        problems = []
        if not sec["flags"].empty:
            problems.append(("Flagged points",
                             sec["flags"][["runtime", *sec["axes"], "cv", "flag"]]))
        if not sec["unconverged"].empty:
            problems.append(("Points that missed their interval target", sec["unconverged"]))
        if sec["skipped"]:
            problems.append(("Skipped points", pd.DataFrame(sec["skipped"])))
        uncounted = uncounted_points(sec["table"], sec["axes"])
        if not uncounted.empty:
            problems.append(("Points whose counting pass did not run", uncounted))
        sections.append({**sec, "problems": problems, "tables": sec.get("tables", []),
                         "grid": [(k, ", ".join(map(str, v))) for k, v in sec["grid"].items()]})
    claims = data["claims"][CLAIM_COLUMNS]
    readings = readings_table(data["claims"])
    verdict_css = {"reproduced": "reproduced", "not reproduced": "not", "at the threshold": "at"}
    prov = data["provenance"]
    return {
        "host": data["host"], "m": data["machine"], "git": data["git"],
        "topology_text": topology_text, "topology_table": topology,
        "verdict_text": (_cut_words(data.get("cut", 0), data.get("over_budget"))
                         + f"Verdicts: {verdict_counts(data['claims'])}. "
                         f"{verdict_text(data['claims'])}"),
        "claims_figure": data.get("claims_figure"),
        "claims": claims, "claim_columns": CLAIM_COLUMNS, "readings": readings,
        "claim_rows": [{**{k: str(v) for k, v in row.items()},
                        "css": verdict_css.get(row["verdict"], "inconclusive")}
                       for row in claims.to_dict("records")],
        "precision_text": PRECISION_TEXT, "precision": data["precision"],
        "noise_text": noise_text, "noise_table": noise_frame,
        "sections": sections,
        "provenance": [(key.replace("_", " "), prov[key]) for key in prov if key != "config"],
        "config": prov["config"],
        "machine_json": json.dumps(data["machine"], indent=2),
    }


def readings_table(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims section's lead: each claim's reading, its interval, the chance another run
    on this machine kind reads it differently (marked near a boundary at
    perfgrid.analyse.readings.NEAR) and the runs that pooled would decide it
    (perfgrid.analyse.readings)."""
    def chance(row: pd.Series) -> str:
        p = row.get("p_differ")
        if not isinstance(p, float) or p != p:
            return ""
        return f"{p:.2f}" + (" (near a boundary)" if row.get("near_boundary") == "yes" else "")

    def runs(row: pd.Series) -> str:
        n = row.get("runs_needed")
        if isinstance(n, float) and n == n:
            return f"{int(n)}"
        return "" if row.get("p_differ") != row.get("p_differ") else "over 100"

    if claims.empty:
        return pd.DataFrame(columns=["claim", "reading", "interval", "p_differ", "runs needed"])
    return pd.DataFrame({
        "claim": [f"{r['experiment']} [{r['runtime']}] {r['hypothesis']}"
                  + (" (sanity)" if r.get("kind") == "sanity" else "")
                  for _, r in claims.iterrows()],
        "reading": claims["verdict"],
        "interval": claims["measured"].map(lambda m: str(m).split(" (")[0]),
        "p_differ": [chance(r) for _, r in claims.iterrows()],
        "runs needed": [runs(r) for _, r in claims.iterrows()]})


def _html_table(frame: pd.DataFrame) -> Markup:
    if frame.empty:
        return Markup("<p><em>(no rows)</em></p>")
    return Markup(frame.to_html(index=False, escape=True, na_rep="",
                                float_format=lambda v: f"{v:.4g}"))


def _img(path: Path) -> Markup:
    data = base64.b64encode(path.read_bytes()).decode()
    return Markup('<img alt="{}" src="data:image/png;base64,{}">').format(path.stem, data)


def _environment(autoescape: bool) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=autoescape, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def html_page(template: str, **context: Any) -> str:
    """An HTML page from ``templates/<template>``, every value escaped (autoescape on).

    The one way perfgrid writes HTML (report, compare, summary): a host folder's name
    or a table cell is text, never markup; tables go through the ``table`` filter
    (pandas ``to_html`` with escaping), images through ``img``.
    """
    page = _environment(autoescape=True)
    page.filters.update(table=_html_table, img=_img)
    return page.get_template(template).render(css=_CSS, **context)


def render(data: dict[str, Any]) -> tuple[str, str]:
    """The Markdown and the HTML report of :func:`build`'s data, from the two templates."""
    shown = view(data)
    md = _environment(autoescape=False)
    md.filters["table"] = md_table
    return md.get_template("report.md.j2").render(shown), html_page("report.html.j2", **shown)
