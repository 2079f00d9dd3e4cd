"""tests/calibration.py (``make calibrate``) run tiny, so that it cannot rot: every
structure's claim is found by name in its experiment's claims and judged through the
records, and every figure is printed beside its target (none asserted: at this size they
are noise)."""

from __future__ import annotations

import calibration


def test_the_calibration_runs_tiny_and_prints_every_figure(capsys) -> None:
    assert calibration.main(["--scale", "0.01", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    for structure in calibration.STRUCTURES:
        assert f"{structure.name} (" in out
    assert "p_differ" in out and "k = 6: median width" in out
    assert out.count("target") >= 4 + 1 + 10


def test_a_recorded_machine_judges_later_runs_with_its_records(tmp_path) -> None:
    """A later run of a simulated machine takes its tau and prior from the machine's
    recorded runs (perfgrid.analyse.betweenrun), as a run of a recorded kind and design does: a
    best-of's rows moderated by them."""
    import numpy as np

    rng = np.random.default_rng(2)
    best_of = next(s for s in calibration.STRUCTURES if s.name == "best-of")
    claim = calibration.Machine(best_of, 1.2, rng, tmp_path).judge()
    assert claim.tau_from.startswith("from 12 recorded runs of this machine kind")
    assert "each row's spread moderated by 12 earlier runs" in claim.basis
    assert np.isfinite(claim.p_differ) and claim.se > 0
