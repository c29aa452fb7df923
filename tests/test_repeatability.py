"""Run-to-run spread per family, and the bar a host-bound family is judged by."""

from __future__ import annotations

import pandas as pd
import pytest

from spartan_py.costmodel import load_machine
from spartan_py.costmodel.families import CSR_CONVERT, EPILOGUE, FAMILIES, MONITOR_PASS
from spartan_py.costmodel.fidelity import family_errors
from spartan_py.costmodel.fits import RunToRunSpread
from spartan_py.costmodel.repeatability import (
    FAMILY_MEDIAN_BAR_PCT,
    family_bar_pct,
    family_spreads,
    launch_spreads,
)
from spartan_py.errors import InputError


def _trace(times: list[float], kernels: list[str], point: str = "p1") -> pd.DataFrame:
    return pd.DataFrame({"point": point, "kernel": kernels, "measured_us": times})


def test_launches_pair_up_by_point_and_order():
    """Each launch's spread is (max - min) / median over the runs; families summarise theirs."""
    kernels = [EPILOGUE, MONITOR_PASS, EPILOGUE]
    runs = [_trace([10.0, 20.0, 5.0], kernels), _trace([11.0, 30.0, 5.0], kernels), _trace([9.0, 25.0, 5.0], kernels)]
    launches = launch_spreads(runs)
    assert list(launches["spread_pct"].round(6)) == [20.0, 40.0, 0.0]
    table = family_spreads(launches).set_index("family")
    assert table.loc[EPILOGUE, "launches"] == 2 and table.loc[EPILOGUE, "median_pct"] == pytest.approx(10.0)
    assert table.loc[MONITOR_PASS, "median_pct"] == pytest.approx(40.0)


def test_runs_of_another_plan_or_one_run_are_refused():
    with pytest.raises(InputError, match="two or more runs"):
        launch_spreads([_trace([1.0], [EPILOGUE])])
    with pytest.raises(InputError, match="different kernels"):
        launch_spreads([_trace([1.0], [EPILOGUE]), _trace([1.0], [MONITOR_PASS])])
    with pytest.raises(InputError, match="share no point"):
        launch_spreads([_trace([1.0], [EPILOGUE], "a"), _trace([1.0], [EPILOGUE], "b")])


def test_host_bound_families_are_judged_by_twice_their_spread():
    """The monitor's separate pass and CSR conversion are host-bound (decided in the family
    table, before any set is drawn); the others keep the fixed bar, as does a host-bound
    family whose spread was never measured."""
    assert {name for name, family in FAMILIES.items() if family.host_bound} == {MONITOR_PASS, CSR_CONVERT}
    assert family_bar_pct(MONITOR_PASS, 12.0) == 24.0
    assert family_bar_pct(MONITOR_PASS, None) == FAMILY_MEDIAN_BAR_PCT
    assert family_bar_pct(EPILOGUE, 12.0) == FAMILY_MEDIAN_BAR_PCT


def test_the_error_table_shows_the_spread_beside_each_error():
    """With a machine whose file holds spreads, each family's row carries its spread, its bar
    and whether its median error is within it: at 20% a host-bound one passes its 2 x 12% bar,
    another family fails the fixed 15%."""
    spread = RunToRunSpread(median_pct=12.0, p90_pct=30.0, launches=10, runs=3, source="x.json")
    machine = load_machine("h100-sxm").model_copy(update={"run_to_run_spread": {MONITOR_PASS: spread}})
    predicted = pd.DataFrame(
        {
            "kernel": [MONITOR_PASS] * 3 + [EPILOGUE] * 3,
            "measured_us": [10.0] * 6,
            "predicted_us": [12.0, 12.0, 12.0, 12.0, 12.0, 12.0],
        }
    )
    table = family_errors(predicted, machine).set_index("family")
    assert table.loc[MONITOR_PASS, "run_to_run_pct"] == 12.0 and table.loc[MONITOR_PASS, "bar_pct"] == 24.0
    assert bool(table.loc[MONITOR_PASS, "within_bar"])
    assert table.loc[EPILOGUE, "bar_pct"] == FAMILY_MEDIAN_BAR_PCT and not table.loc[EPILOGUE, "within_bar"]
    assert pd.isna(table.loc[EPILOGUE, "run_to_run_pct"])
    assert "run_to_run_pct" not in family_errors(predicted).columns


def test_a_carried_over_machine_keeps_its_sources_spreads():
    h100 = load_machine("h100-sxm")
    assert load_machine("h200-sxm").run_to_run_spread == h100.run_to_run_spread
