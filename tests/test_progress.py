import os

from perfgrid.progress import eta_line


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


def test_with_looks_the_total_is_an_upper_bound(tmp_path):
    paths = [str(tmp_path / f"{i}.json") for i in range(10)]
    for i, path in enumerate(paths[:3]):
        _finished(path, 1000.0 + 20 * (i + 1))
    assert eta_line(paths, started=1000.0, now=1060.0, at_most=True) == (
        "perfgrid: 3 of at most 10 benchmark points done, at most about 2 min left "
        "(looks may let later rounds go)")


def test_with_a_time_budget_the_line_says_how_long_later_rounds_may_start(tmp_path):
    paths = [str(tmp_path / "a.json")]
    assert eta_line(paths, started=0.0, now=600.0, budget=(3000.0, 3)) == (
        "perfgrid: 0/1 benchmark points done; the time budget lets rounds after 3 start "
        "for 40 more min")
    assert eta_line(paths, started=0.0, now=3001.0, budget=(3000.0, 3)) == (
        "perfgrid: 0/1 benchmark points done; the time budget is spent: rounds after 3 "
        "are let go")


def test_with_a_time_budget_the_eta_counts_later_rounds_only_up_to_its_end(tmp_path):
    first = [str(tmp_path / f"p{i}" / "round=1.json") for i in range(5)]
    later = [str(tmp_path / f"p{i}" / "round=4.json") for i in range(5)]
    for i, path in enumerate(first[:3]):
        _finished(path, 1000.0 + 60 * (i + 1))
    # 3 points in 180 s: 60 s each; 2 of rounds up to 3 left (2 min), then 5 later ones
    # (5 min), of which the budget, ending 4 min from now, lets 2 min start
    assert eta_line(first + later, started=1000.0, now=1180.0) == (
        "perfgrid: 3/10 benchmark points done, about 7 min left")
    assert eta_line(first + later, started=1000.0, now=1180.0, budget=(1420.0, 3)) == (
        "perfgrid: 3/10 benchmark points done, about 4 min left; the time budget lets "
        "rounds after 3 start for 4 more min")
    # past the budget's end only the rounds up to 3 are left to run
    assert eta_line(first + later, started=1000.0, now=1180.0, budget=(1100.0, 3)) == (
        "perfgrid: 3/10 benchmark points done, about 2 min left; the time budget is "
        "spent: rounds after 3 are let go")


def test_no_eta_before_a_twentieth_of_the_points(tmp_path):
    """The first points done are few and not typical: the line waits for 5 % of them."""
    paths = [str(tmp_path / f"{i}.json") for i in range(100)]
    for i, path in enumerate(paths[:4]):
        _finished(path, 1000.0 + 20 * (i + 1))
    assert eta_line(paths, started=1000.0, now=1080.0) == (
        "perfgrid: 4/100 benchmark points done, time left said once 5% of them are done")
    _finished(paths[4], 1080.0)
    assert eta_line(paths, started=1000.0, now=1100.0).endswith("about 32 min left")
