import os

from perfgrid.pipeline.progress import eta_line


def _finished(path: str, mtime: float) -> None:
    """A point's result written at ``mtime`` (its folder made if need be)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").close()
    os.utime(path, (mtime, mtime))


def test_eta_from_points_finished_in_this_run(tmp_path):
    paths = [str(tmp_path / f"{i}.json") for i in range(10)]
    for i, path in enumerate(paths[:4]):
        _finished(path, 900.0 if i == 0 else 1000.0 + 20 * i)  # one from an earlier run
    line = eta_line(paths, started=1000.0, now=1060.0)
    # 3 points in 60 s: 20 s each, 6 left: 2 min
    assert line == "perfgrid: 4/10 benchmark points done, about 2 min left"


def test_no_eta_before_the_first_point(tmp_path):
    assert eta_line([str(tmp_path / "a.json")], started=0.0) == (
        "perfgrid: 0/1 benchmark points done")


def test_with_a_time_budget_the_line_counts_down_to_it_and_says_when_it_is_past(tmp_path):
    paths = [str(tmp_path / f"{i}.json") for i in range(10)]
    for i, path in enumerate(paths[:3]):
        _finished(path, 1000.0 + 20 * (i + 1))
    assert eta_line(paths, started=1000.0, now=1060.0, budget_end=3460.0) == (
        "perfgrid: 3/10 benchmark points done, about 2 min left; 40 min of the time budget "
        "left")
    # past it nothing is cut: the ETA counts every point left
    assert eta_line(paths, started=1000.0, now=1060.0, budget_end=1000.0) == (
        "perfgrid: 3/10 benchmark points done, about 2 min left; past the time budget "
        "(nothing is cut: the report marks the run as over its budget)")


def test_the_line_from_a_plan_counts_every_job_and_the_budget_from_the_runs_start():
    from perfgrid.pipeline.progress import from_plan

    plan = {"budget": {"minutes": 80}, "jobs": [{"result": "a"}, {"result": "b"}]}
    assert from_plan(plan, 100.0) == {"expected": ["a", "b"], "budget_end": 100.0 + 4800}
    assert from_plan({**plan, "budget": {"minutes": None}}, 100.0)["budget_end"] is None
