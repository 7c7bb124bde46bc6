"""The soak's latency verdict (bench/soak_report.py `latency_check`): a p99 is judged only over
windows large enough that one stall of the machine does not set it; below that, the medians."""

from __future__ import annotations

from bench.soak_report import TAIL_SAMPLES, latency_check


def window(n: int, typical: float, slow: list[float]) -> list[float]:
    return [typical] * (n - len(slow)) + slow


def test_a_short_window_with_one_stall_more_is_judged_by_its_median_and_passes() -> None:
    first, last = window(180, 0.30, [0.84, 0.80]), window(180, 0.31, [1.47, 1.40])
    check = latency_check(first, last)
    assert check["judged"] == "median" and check["ok"], check
    assert check["last_window_s"] == 1.4  # the p99 (the second-slowest of 180) is still reported


def test_a_short_window_whose_median_grew_fails() -> None:
    check = latency_check(window(180, 0.30, []), window(180, 0.60, []))
    assert check["judged"] == "median" and not check["ok"], check


def test_long_windows_judge_the_p99() -> None:
    n = TAIL_SAMPLES
    spikes = [2.0] * (n // 50)  # 2% of the prompts: the p99 is one of them
    check = latency_check(window(n, 0.30, [0.8] * (n // 50)), window(n, 0.30, spikes))
    assert check["judged"] == "p99" and not check["ok"], check
    assert latency_check(window(n, 0.30, [0.8] * 5), window(n, 0.31, [0.9] * 5))["ok"]


def test_an_empty_window_fails() -> None:
    assert not latency_check([], window(10, 0.3, []))["ok"]
