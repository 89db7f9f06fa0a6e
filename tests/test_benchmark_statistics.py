"""The statistics the benchmark page's ratios rest on (benchmarks/common.py)."""

from __future__ import annotations

from benchmarks.common import median_interval, paired_step_seconds


def test_median_interval_takes_the_order_statistics_of_the_binomial_table():
    # For 100 values the distribution-free 95% interval of the median runs from
    # the 40th to the 61st smallest (normal approximation of binomial(100, 1/2)).
    values = [float(v) for v in range(100, 0, -1)]  # order must not matter
    interval = median_interval(values)
    assert (interval["low"], interval["median"], interval["high"], interval["n"]) == (40.0, 50.5, 61.0, 100)


def test_median_interval_of_a_few_values_spans_them_all():
    assert median_interval([3.0, 1.0, 2.0]) == {"median": 2.0, "low": 1.0, "high": 3.0, "n": 3}


def test_pairs_run_back_to_back_and_swap_their_order():
    calls = []
    steppers = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = paired_step_seconds(steppers, warmup=1, seconds=0.2)
    assert calls[:2] == ["a", "b"]  # the warm-up, one step each
    pairs = [tuple(calls[i : i + 2]) for i in range(2, len(calls), 2)]
    assert len(pairs) >= 2
    assert pairs == [("a", "b") if i % 2 == 0 else ("b", "a") for i in range(len(pairs))]
    assert len(times["a"]) == len(times["b"]) == len(pairs)
