"""Timing helpers: host timing, paired differences, and interleaved GPU timing."""

from __future__ import annotations

import time

import pytest

from spartan_py.errors import InputError
from spartan_py.timing import difference_by_turns_cpu_us, hold_stream, paired_difference, time_cpu


def test_paired_difference_cancels_common_drift():
    baseline = [10.0, 20.0, 30.0, 40.0, 50.0]  # a drift far larger than the difference
    values = [b + 1.0 for b in baseline]
    diff = paired_difference(values, baseline)
    assert diff == {"median": 1.0, "p10": 1.0, "p90": 1.0}


def test_paired_difference_percentiles():
    diff = paired_difference([1.0, 2.0, 3.0, 4.0, 100.0], [0.0] * 5)
    assert diff["median"] == 3.0
    assert diff["p10"] < diff["median"] < diff["p90"] < 100.0


def test_time_cpu_measures_the_work():
    stats = time_cpu(lambda: time.sleep(0.002), repeats=3, warmup=0)
    assert stats["repeats"] == 3
    assert 1500 < stats["median_us"] < 200000
    assert stats["p10_us"] <= stats["median_us"] <= stats["p90_us"]


def test_difference_by_turns_on_the_host_is_the_extra_work():
    extra = difference_by_turns_cpu_us(lambda: time.sleep(0.003), lambda: time.sleep(0.001), rounds=3)
    assert 1000 < extra < 100000


@pytest.mark.gpu
def test_difference_by_turns_on_the_gpu_is_the_extra_work():
    import cupy

    from spartan_py.timing import difference_by_turns_us

    data = cupy.ones(1 << 24, dtype=cupy.float32)
    one = difference_by_turns_us(lambda: data.sum(), lambda: None, rounds=6, warmup_ms=20)
    extra = difference_by_turns_us(lambda: [data.sum(), data.sum()], lambda: data.sum(), rounds=6)
    assert one > 0 and 0.5 * one < extra < 1.5 * one


@pytest.mark.gpu
def test_time_interleaved_sees_twice_the_work():
    import cupy

    from spartan_py.timing import time_interleaved

    data = [cupy.ones(1 << 24, dtype=cupy.float32) for _ in range(2)]

    def work(copies):
        return lambda i: [data[i % 2].sum() for _ in range(copies)]

    times = time_interleaved({"one": work(1), "two": work(2)}, rounds=6, calls=4)
    assert set(times) == {"one", "two"} and all(len(v) == 6 for v in times.values())
    extra = paired_difference(times["two"], times["one"])["median"]
    one = sorted(times["one"])[3]
    assert 0.5 * one < extra < 1.5 * one


def test_hold_stream_needs_a_positive_time():
    with pytest.raises(InputError, match="positive"):
        hold_stream(0.0)


@pytest.mark.gpu
def test_hold_stream_hides_the_hosts_time_from_events():
    import cupy

    data = cupy.ones(1 << 20, dtype=cupy.float32)

    def elapsed_ms(hold: bool) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        cupy.cuda.get_current_stream().synchronize()
        if hold:
            hold_stream(0.03)
        start.record()
        time.sleep(0.01)  # the host is slow to issue the work
        data.sum()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop)

    data.sum()
    assert elapsed_ms(hold=False) > 8.0  # the GPU waited for the host between the events
    assert elapsed_ms(hold=True) < 2.0  # the work alone
