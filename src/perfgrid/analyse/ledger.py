"""The claims ledger: what each claim is about, stated before the data it judges (an entry
changed after recorded runs were in view is named in docs/ledger-history.md; run.json
keeps the ledgers' :func:`digest`).

Each experiment's package holds a ``claims.yaml``, a list of entries, one per hypothesis its
analysis judges (the ``hypothesis`` text is the key, exactly as the analysis writes it).
An entry says:

- ``kind``: ``seed`` (the seed post makes the claim), ``project`` (this project's own
  claim, not in the seed) or ``sanity`` (it holds by construction, so it checks the
  harness, not the runtime: shown in the report, left out of the verdict totals);
- ``seed_figure``: the seed's own figure, in words and numbers (``"3.0x (2,264,042 vs
  749,027 spawns/s)"``), or ``none``; ``seed_quote``: a short quote of the seed (a few
  words, in the post's language) and ``seed_where``: where it is (seed file and part);
  a claim without a seed figure says in ``why_a_claim`` why it is a claim at all;
- ``op`` and ``threshold``: as the analysis judges (``>=``, ``>``, ``<=``, ``<``, or ``~``:
  "about", two-sided); :func:`check` holds them in step with the analysis. A compound
  claim (every part must hold, perfgrid.analyse.analysis.all_of) has ``op: all`` and no
  threshold: its parts' rules are in its criterion;
- ``threshold_why``: one line on why the threshold differs from the seed's figure, where
  it does;
- ``margin``: the relative equivalence margin (0.10: within 10 % of the threshold), fixed
  before any data, from the seed where it says "about" (``margin_from: seed``), or set by
  the project where the quantity itself fixes it (an exact count: ``margin_from:
  project``, the reason in ``threshold_why``), else :data:`DEFAULT_MARGIN`
  (``margin_from: default``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import yaml

KINDS = ("seed", "project", "sanity")
#: the kinds counted in a run's verdict totals (sanity checks are shown apart)
COUNTED = ("seed", "project")
OPS = (">=", ">", "<=", "<", "~", "all")
MARGIN_FROM = ("seed", "project", "default")
#: the equivalence margin of a claim whose seed gives none: within 10 % of the threshold
DEFAULT_MARGIN = 0.10
FILE = "claims.yaml"
_REQUIRED = ("hypothesis", "kind", "seed_figure", "op", "margin", "margin_from")


class LedgerError(ValueError):
    """A claims.yaml that is malformed, or a claim judged unlike its ledger entry."""


@dataclass(frozen=True)
class Entry:
    """One claim of the ledger (see the module docstring for each field)."""

    experiment: str
    hypothesis: str
    kind: str
    seed_figure: str
    op: str
    threshold: float
    margin: float
    margin_from: str
    seed_quote: str = ""
    seed_where: str = ""
    threshold_why: str = ""
    why_a_claim: str = ""

    @property
    def counted(self) -> bool:
        return self.kind in COUNTED


def _entry(experiment: str, number: int, raw: object) -> Entry:
    where = f"{experiment}/{FILE}, entry {number}"
    if not isinstance(raw, dict):
        raise LedgerError(f"{where}: a mapping with keys {', '.join(_REQUIRED)}")
    missing = [k for k in _REQUIRED if raw.get(k) in (None, "")]
    if missing:
        raise LedgerError(f"{where}: missing {', '.join(missing)}")
    known = set(Entry.__dataclass_fields__) - {"experiment"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise LedgerError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(sorted(known))}")
    if raw["kind"] not in KINDS:
        raise LedgerError(f"{where}: kind {raw['kind']!r} is not one of {', '.join(KINDS)}")
    if raw["op"] not in OPS:
        raise LedgerError(f"{where}: op {raw['op']!r} is not one of {', '.join(OPS)}")
    if raw["margin_from"] not in MARGIN_FROM:
        raise LedgerError(f"{where}: margin_from {raw['margin_from']!r} is not one of "
                          f"{', '.join(MARGIN_FROM)}")
    if raw["margin_from"] == "project" and not str(raw.get("threshold_why", "")).strip():
        raise LedgerError(f"{where}: margin_from project needs threshold_why to say why")
    margin = float(raw["margin"])
    if not 0 < margin < 1:
        raise LedgerError(f"{where}: margin {margin!r}; allowed: between 0 and 1")
    if raw["margin_from"] == "default" and margin != DEFAULT_MARGIN:
        raise LedgerError(f"{where}: margin_from default but margin {margin} (the default is "
                          f"{DEFAULT_MARGIN})")
    threshold = raw.get("threshold")
    if (threshold is None) != (raw["op"] == "all"):
        raise LedgerError(f"{where}: op {raw['op']} " + (
            "takes no threshold" if raw["op"] == "all" else "needs a threshold"))
    entry = Entry(experiment=experiment, **{k: raw[k] for k in raw if k != "threshold"},
                  threshold=math.nan if threshold is None else float(threshold))
    if entry.seed_figure.strip().lower() == "none" and not entry.why_a_claim.strip():
        raise LedgerError(f"{where}: no seed figure, so why_a_claim must say why it is a claim")
    if entry.seed_figure.strip().lower() != "none" and not entry.seed_where.strip():
        raise LedgerError(f"{where}: a seed figure needs seed_where (which seed, which part)")
    return entry


def path(experiment: str):
    """Where experiment ``experiment``'s ledger is (its package's claims.yaml), or None:
    an experiment a test declares on the fly has no package."""
    try:
        return resources.files(f"perfgrid.experiments.{experiment}").joinpath(FILE)
    except ModuleNotFoundError:
        return None


@functools.cache
def entries(experiment: str) -> dict[str, Entry]:
    """Experiment ``experiment``'s ledger, by hypothesis; empty where it has no claims.yaml."""
    found_at = path(experiment)
    if found_at is None or not found_at.is_file():
        return {}
    raw = yaml.safe_load(found_at.read_text()) or []
    if not isinstance(raw, list):
        raise LedgerError(f"{experiment}/{FILE}: a list of entries")
    found: dict[str, Entry] = {}
    for number, item in enumerate(raw, 1):
        entry = _entry(experiment, number, item)
        if entry.hypothesis in found:
            raise LedgerError(f"{experiment}/{FILE}: hypothesis {entry.hypothesis!r} twice")
        found[entry.hypothesis] = entry
    return found


def entry(experiment: str, hypothesis: str) -> Entry | None:
    """The ledger entry of a claim, or None where its experiment keeps no ledger."""
    ledger = entries(experiment)
    if not ledger:
        return None
    try:
        return ledger[hypothesis]
    except KeyError:
        raise LedgerError(f"{experiment}/{FILE}: no entry for hypothesis {hypothesis!r}; "
                          f"every claim an analysis judges has one") from None


def check(found: Entry, op: str, threshold: float) -> None:
    """LedgerError where the analysis judges ``found``'s claim by another rule than the
    ledger states: the ledger is what a reader trusts, so the two never drift apart. The
    parts of a compound claim (``op: all``) each have their own rule."""
    if found.op == "all":
        return
    same = found.op == op and math.isclose(found.threshold, float(threshold), rel_tol=1e-9)
    if not same:
        raise LedgerError(f"{found.experiment}/{FILE}: {found.hypothesis!r} states "
                          f"{found.op} {found.threshold:g}, the analysis judges {op} "
                          f"{float(threshold):g}")


def digest(experiment_names: list[str] | None = None) -> str:
    """A short hash of every experiment's claims ledger as written (run.json keeps it, and
    a record row too): a verdict names the rules it was judged by."""
    import hashlib

    from perfgrid import experiments

    hashed = hashlib.sha256()
    for name in sorted(experiment_names or experiments.available()):
        found_at = path(name)
        text = found_at.read_text() if found_at is not None and found_at.is_file() else ""
        hashed.update(f"{name}\0{text}\0".encode())
    return hashed.hexdigest()[:16]
