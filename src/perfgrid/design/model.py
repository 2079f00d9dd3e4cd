"""The plan's model: a benchmark job, a claim block, a noise profile's pair and the plan
(the words are perfgrid.design.plan's), and plan.json's one reader and writer
(:meth:`Plan.from_json`, :meth:`Plan.to_json`). Measurement reads the design through these
types only (tests/test_layers.py): a claim block gets its part of the plan, and the noise
profile its pairs, as plan.json's data."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgrid import experiments
from perfgrid.kit import formats
from perfgrid.kit.formats import FORMAT

#: one benchmark job: (experiment, the point's axis values as text in axis order, round)
JobKey = tuple[str, tuple[str, ...], int]
#: what a job's design is: what it measures and how often, not when or where it writes
DESIGN_FIELDS = ("experiment", "key", "round", "rounds", "claim", "bench", "options")


@dataclass(frozen=True)
class Job:
    """One benchmark job: one round of one point. The run's order
    (perfgrid.design.order) draws jobs that have only their experiment, point and round;
    the plan gives each the rest."""

    experiment: str
    #: the point's axis values, typed, in axis order
    point: dict[str, Any]
    round: int
    #: how many rounds the point has
    rounds: int = 1
    #: whether a claim compares the point (a claim point)
    claim: bool = False
    #: its place in the run's order as a Snakemake priority: the first job -1, then -2 ...
    priority: int = 0
    #: the rule that makes it: its experiment's sweep rule or a claim block
    rule: str = ""
    #: the harness's words for the point, round and repetitions (plan.bench_words)
    bench: tuple[str, ...] = ()
    #: its experiment's ``--option KEY=VALUE`` words (perfgrid.design.jobs)
    options: tuple[str, ...] = ()
    result: str = ""
    log: str = ""

    def key_on(self, axes: Iterable[str]) -> JobKey:
        """(experiment, the values of ``axes`` as text, round)."""
        return self.experiment, tuple(str(self.point[a]) for a in axes), self.round

    @property
    def key(self) -> JobKey:
        """(experiment, axis values as text, round): what Snakemake's wildcards name."""
        return self.key_on(experiments.get(self.experiment).axes)

    @property
    def point_key(self) -> str:
        """The point's name (``variant=dd/cache=warm``, Experiment.point_key)."""
        return experiments.get(self.experiment).point_key(self.point)

    @property
    def args(self) -> list[str]:
        """The harness's words after the experiment: the point's, then its options."""
        return [*self.bench, *self.options]

    def to_json(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "point": self.point, "key": self.point_key,
                "round": self.round, "rounds": self.rounds, "claim": self.claim,
                "priority": self.priority, "rule": self.rule, "bench": list(self.bench),
                "options": list(self.options), "result": self.result, "log": self.log}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        return cls(experiment=data["experiment"], point=dict(data["point"]),
                   round=data["round"], rounds=data["rounds"], claim=data["claim"],
                   priority=data["priority"], rule=data["rule"], bench=tuple(data["bench"]),
                   options=tuple(data["options"]), result=data["result"], log=data["log"])


@dataclass(frozen=True)
class Block:
    """A claim block: one Snakemake job measuring one round of an experiment's points
    back to back (perfgrid.measure.block)."""

    name: str
    experiment: str
    round: int
    #: 1, or 2, 3 ... for a later block of the same experiment and round
    part: int
    #: its first job's priority
    priority: int
    #: its jobs, in the order they are measured
    jobs: tuple[Job, ...]

    @property
    def results(self) -> tuple[str, ...]:
        return tuple(job.result for job in self.jobs)

    def to_json(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "round": self.round, "part": self.part,
                "priority": self.priority, "results": list(self.results)}


@dataclass(frozen=True)
class NoiseSide:
    """One point of a noise pair, as the harness is told to measure it: a benchmark job's
    words for its point and options (perfgrid.measure.noiseprofile adds the repetitions)."""

    label: str
    experiment: str
    point: dict[str, Any]
    #: the loops of each value
    loops: int
    #: the harness's words after the experiment: ``--point AXIS=VALUE`` and ``--option``
    words: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "experiment": self.experiment, "point": self.point,
                "loops": self.loops, "words": list(self.words)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NoiseSide:
        return cls(label=data["label"], experiment=data["experiment"],
                   point=dict(data["point"]), loops=data["loops"], words=tuple(data["words"]))


@dataclass(frozen=True)
class NoisePair:
    """Two points a claim compares as the ratio ``A / B`` of their rates, which the noise
    profile measures before the benchmarks (Experiment.noise_pair)."""

    name: str
    claim: str
    a: NoiseSide
    b: NoiseSide

    def to_json(self) -> dict[str, Any]:
        return {"claim": self.claim, "a": self.a.to_json(), "b": self.b.to_json()}

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> NoisePair:
        return cls(name=name, claim=data["claim"], a=NoiseSide.from_json(data["a"]),
                   b=NoiseSide.from_json(data["b"]))


def noise_to_json(pairs: dict[str, NoisePair], skipped: dict[str, str]) -> dict[str, Any]:
    """plan.json's ``noise`` entry: the pairs by name and each other pair's reason."""
    return {"pairs": {name: pair.to_json() for name, pair in pairs.items()},
            "skipped": dict(skipped)}


def noise_from_json(data: dict[str, Any]) -> tuple[dict[str, NoisePair], dict[str, str]]:
    """The pairs and skipped pairs of plan.json's ``noise`` entry (:func:`noise_to_json`)."""
    return ({name: NoisePair.from_json(name, pair) for name, pair in data["pairs"].items()},
            dict(data["skipped"]))


@dataclass(frozen=True)
class Plan:
    """Every benchmark job of a run and how it runs (perfgrid.design.plan.build)."""

    #: the result set's folder (``results/<host>``)
    root: str
    #: every job, in grid order (experiment, then round, then the grid's own order)
    jobs: tuple[Job, ...]
    #: the claim blocks by name, in the order they run
    blocks: dict[str, Block]
    #: each experiment's most rounds of any point: >1, its results are folders of rounds
    rounds: dict[str, int]
    #: the time budget: ``minutes`` (None: none), which cuts nothing
    budget: dict[str, Any]
    #: the noise profile's pairs this machine can run, by name: no part of the design
    #: (:func:`design_digest`), since the profile measures no claim
    noise: dict[str, NoisePair] = field(default_factory=dict)
    #: each other pair of the registry's, and why it is not measured
    noise_skipped: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def _by_key(self) -> dict[JobKey, Job]:
        return {job.key: job for job in self.jobs}

    def job(self, key: JobKey) -> Job | None:
        """The job of ``key`` (:attr:`Job.key`), or None where the plan has none."""
        return self._by_key.get(key)

    def results(self, experiment: str) -> list[str]:
        """The results of ``experiment``'s jobs, in grid order."""
        return [job.result for job in self.jobs if job.experiment == experiment]

    def block_plan(self, name: str) -> dict[str, Any]:
        """Claim block ``name``'s part of the plan, as plan.json's data: the block and its
        jobs (what perfgrid.measure.block runs, on its command line)."""
        members = self.blocks[name]
        return Plan(root=self.root, jobs=members.jobs, blocks={name: members},
                    rounds={members.experiment: self.rounds[members.experiment]},
                    budget=self.budget).to_json()

    def to_json(self) -> dict[str, Any]:
        """The plan as plain data (plan.json): ``format`` (:data:`FORMAT`), ``root``,
        ``budget``, ``experiments`` (each one's most ``rounds``), ``jobs`` (grid order),
        ``blocks`` (by name, in run order) and ``noise`` (:func:`noise_to_json`)."""
        return {"format": FORMAT, "root": self.root, "budget": self.budget,
                "experiments": {e: {"rounds": n} for e, n in self.rounds.items()},
                "jobs": [job.to_json() for job in self.jobs],
                "blocks": {name: b.to_json() for name, b in self.blocks.items()},
                "noise": noise_to_json(self.noise, self.noise_skipped)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """The plan of plan.json's ``data`` (:meth:`to_json`), its blocks holding their
        jobs: the one reader of plan.json."""
        jobs = tuple(Job.from_json(job) for job in data["jobs"])
        by_result = {job.result: job for job in jobs}
        blocks = {name: Block(name=name, experiment=b["experiment"], round=b["round"],
                              part=b["part"], priority=b["priority"],
                              jobs=tuple(by_result[r] for r in b["results"]))
                  for name, b in data["blocks"].items()}
        # a format-1 plan.json (an earlier perfgrid's) has no noise pairs
        noise, skipped = (noise_from_json(data["noise"]) if formats.of(data) >= 2
                          else ({}, {}))
        return cls(root=data["root"], jobs=jobs, blocks=blocks,
                   rounds={e: v["rounds"] for e, v in data["experiments"].items()},
                   budget=dict(data["budget"]), noise=noise, noise_skipped=skipped)

    def digest(self) -> str:
        """A short hash of :meth:`to_json`: rule plan's params, so a changed plan is
        written again."""
        return short_digest(json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")))


def read(path: str | Path) -> dict[str, Any]:
    """plan.json's data as it was written, by this perfgrid or an earlier one: what a run's
    design digest (:func:`design_digest`) and budget are read from. This run's plan is
    ``Plan.from_json(read(path))``."""
    return json.loads(Path(path).read_text())


def design_digest(plan: dict[str, Any]) -> str:
    """A short hash of what a plan (plan.json's data) measures: every job's experiment,
    point, round, rounds, claim flag and command words, in a canonical order; not its
    place in the run's order, its paths or the host. Two runs of one design are
    comparable run for run (perfgrid.analyse.betweenrun)."""
    jobs = sorted(([job.get(k) for k in DESIGN_FIELDS] for job in plan.get("jobs", [])),
                  key=lambda job: json.dumps(job, sort_keys=True))
    return short_digest(json.dumps(jobs, sort_keys=True, separators=(",", ":")))


def short_digest(text: str) -> str:
    """A short hash of ``text``, for a params digest that Snakemake records and compares."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
