import os

from perfgrid.progress import eta_line


def test_eta_from_points_finished_in_this_run(tmp_path):
    paths = [str(tmp_path / f"{i}.json") for i in range(10)]
    for i, path in enumerate(paths[:4]):
        open(path, "w").close()
        mtime = 900.0 if i == 0 else 1000.0 + 20 * i  # one from an earlier run
        os.utime(path, (mtime, mtime))
    line = eta_line(paths, started=1000.0, now=1060.0)
    # 3 points in 60 s: 20 s each, 6 left: 2 min
    assert line == "perfgrid: 4/10 benchmark points done, about 2 min left"


def test_no_eta_before_the_first_point(tmp_path):
    assert eta_line([str(tmp_path / "a.json")], started=0.0) == (
        "perfgrid: 0/1 benchmark points done")


def test_with_looks_the_total_is_an_upper_bound(tmp_path):
    paths = [str(tmp_path / f"{i}.json") for i in range(10)]
    for i, path in enumerate(paths[:3]):
        open(path, "w").close()
        os.utime(path, (1000.0 + 20 * (i + 1),) * 2)
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
