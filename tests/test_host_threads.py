"""The host's kernels spread over threads: the range split and the run."""

import threading

import numpy as np
import pytest

from spartan_py.host.threads import host_threads, ordered_map, run_split, split_range


@pytest.mark.parametrize(("count", "parts"), [(0, 4), (1, 4), (7, 3), (10, 10), (5, 1), (3, 8)])
def test_split_range_covers_the_range_once_in_order(count, parts):
    bounds = split_range(count, parts)
    assert len(bounds) == min(count, max(parts, 1))
    covered = [i for start, stop in bounds for i in range(start, stop)]
    assert covered == list(range(count))
    sizes = [stop - start for start, stop in bounds]
    assert all(size > 0 for size in sizes) and (not sizes or max(sizes) - min(sizes) <= 1)


def test_run_split_runs_every_part_and_waits_for_them():
    seen = np.zeros(1000, np.int64)
    threads = set()

    def kernel(start, stop, out, value):
        threads.add(threading.get_ident())
        out[start:stop] += value

    run_split(kernel, seen.size, seen, 3, parts=4)
    assert (seen == 3).all()
    assert len(threads) >= min(2, host_threads())


def test_run_split_raises_a_part_s_error_after_all_parts_finish():
    done = np.zeros(4, np.int64)

    def kernel(start, stop):
        if start == 1:
            raise ValueError("part 1 failed")
        done[start:stop] = 1

    with pytest.raises(ValueError, match="part 1 failed"):
        run_split(kernel, 4, parts=4)
    assert done.tolist() == [1, 0, 1, 1]


def test_run_split_of_nothing_calls_nothing():
    run_split(lambda start, stop: pytest.fail("called"), 0)


def test_a_forked_child_runs_its_parts_on_threads_of_its_own():
    """A child forked after the pool was made has none of its threads: it makes its own."""
    import multiprocessing

    run_split(lambda start, stop: None, 4, parts=2)  # the parent's pool exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        assert pool.apply_async(_sum_in_parts, (1000,)).get(timeout=60) == sum(range(1000))


def _sum_in_parts(count: int) -> int:
    totals = np.zeros(count, np.int64)

    def kernel(start, stop):
        totals[start:stop] = np.arange(start, stop)

    run_split(kernel, count, parts=4)
    return int(totals.sum())


def test_ordered_map_keeps_order_reads_lazily_and_uses_threads():
    """Results in the items' order whatever order they finish in; items read at most twice the
    workers ahead of the result last taken (a network built layer by layer is never whole)."""
    import time

    read, threads = [], set()

    def items():
        for i in range(40):
            read.append(i)
            yield i

    def slow_square(i):
        threads.add(threading.get_ident())
        time.sleep(0.002 * (i % 3))  # later items may finish first
        return i * i

    results = ordered_map(slow_square, items(), workers=3)
    assert [next(results) for _ in range(5)] == [0, 1, 4, 9, 16]
    assert len(read) <= 5 + 2 * 3
    assert list(results) == [i * i for i in range(5, 40)]
    assert len(threads) > 1


def test_ordered_map_raises_a_functions_error():
    def fail_on_three(i):
        if i == 3:
            raise ValueError("three")
        return i

    with pytest.raises(ValueError, match="three"):
        list(ordered_map(fail_on_three, range(10), workers=2))
