"""The benchmark suite's pure helpers (src/queenpy/bench/parsing.py): wrk, pgbench and /proc text.

The suite itself never runs in the test suite; these tests only read text samples captured from real runs.
"""

from __future__ import annotations

import pytest

from queenpy.bench.parsing import (
    median,
    parse_cpu_iowait,
    parse_cpu_line,
    parse_duration_us,
    parse_env_assignments,
    parse_pgbench,
    parse_proc_stat,
    parse_wrk,
    percentile,
    pgbench_log_latencies_us,
    select_names,
)
from queenpy.bench.wrk import lua_literal

WRK_WITH_COUNTERS = """\
Running 3s test @ http://127.0.0.1:45007
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   114.93ms   87.31ms 401.63ms   80.34%
    Req/Sec   271.63    132.29   680.00     69.39%
  Latency Distribution
     50%   82.36ms
     75%  156.85ms
     90%  228.94ms
     99%  401.56ms
  1420 requests in 3.04s, 3.60MB read
Requests/sec:    467.29
Transfer/sec:      1.18MB
QUEENBENCH {"requests":1420,"duration_us":3038820,"status_errors":0,"connect":0,"read":0,"write":0,\
"timeout":0,"latency_mean_us":114932.2,"latency_max_us":401632,"p50":82356,"p75":156847,"p90":228940,\
"p99":401562,"p99_9":401630,"queued":14200,"not_queued":0,"bad_responses":0}
"""

WRK_PLAIN_WITH_ERRORS = """\
Running 10s test @ http://127.0.0.1:6632
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   850.00us  120.10us   1.02s    99.00%
    Req/Sec     1.10k    50.00     1.20k    70.00%
  Latency Distribution
     50%  812.00us
     75%  900.00us
     90%    1.00ms
     99%    2.50ms
  11000 requests in 10.00s, 2.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:   1100.00
Transfer/sec:    204.80KB
"""

PGBENCH = """\
pgbench (16.2)
transaction type: /tmp/qb/limit-insert-10-40B.sql
scaling factor: 1
query mode: prepared
number of clients: 50
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 10312
number of failed transactions: 0 (0.000%)
latency average = 14.551 ms
initial connection time = 80.313 ms
tps = 3436.155877 (without initial connection time)
"""


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("850.00us", 850.0),
        ("14.20ms", 14_200.0),
        ("1.02s", 1_020_000.0),
        ("2.00m", 120_000_000.0),
    ],
)
def test_wrk_durations(text: str, micros: float) -> None:
    assert parse_duration_us(text) == pytest.approx(micros)


def test_wrk_duration_rejects_other_text() -> None:
    with pytest.raises(ValueError):
        parse_duration_us("12 parsecs")


def test_wrk_counter_line_is_authoritative() -> None:
    result = parse_wrk(WRK_WITH_COUNTERS)
    assert result.requests == 1420
    assert result.duration_s == pytest.approx(3.03882)
    assert result.errors == 0
    assert result.latency_us[50] == 82356
    assert result.latency_us[99.9] == 401630
    assert result.latency_mean_us == pytest.approx(114932.2)
    assert result.counters == {"queued": 14200, "not_queued": 0, "bad_responses": 0}


def test_wrk_counter_line_with_a_sample_of_an_unexpected_response() -> None:
    line = (
        'QUEENBENCH {"requests":3,"duration_us":1000000,"status_errors":1,"p50":900,"queued":20,'
        '"not_queued":10,"bad_responses":1,"sample":"400 {\\u0022error\\u0022:\\u0022queue is'
        ' required\\u0022}\\u000a"}'
    )
    result = parse_wrk(line)
    assert result.sample == '400 {"error":"queue is required"}\n'
    assert result.counters == {"queued": 20, "not_queued": 10, "bad_responses": 1}
    assert parse_wrk(WRK_WITH_COUNTERS).sample is None


def test_wrk_counter_line_with_the_count_of_slow_requests() -> None:
    result = parse_wrk(
        'QUEENBENCH {"requests":4000,"duration_us":10000000,"status_errors":0,"p99":87000,'
        '"over_10ms":52,"queued":4000}'
    )
    assert result.over_10ms == 52
    assert result.counters == {"queued": 4000}
    assert parse_wrk(WRK_WITH_COUNTERS).over_10ms is None


def test_wrk_text_only_with_errors() -> None:
    result = parse_wrk(WRK_PLAIN_WITH_ERRORS)
    assert result.requests == 11000
    assert result.duration_s == pytest.approx(10.0)
    assert result.non_2xx == 7
    assert result.socket_errors == {"connect": 0, "read": 2, "write": 0, "timeout": 3}
    assert result.errors == 12
    assert result.latency_us == {50: 812.0, 75: 900.0, 90: 1000.0, 99: 2500.0}
    assert result.latency_max_us == pytest.approx(1_020_000.0)


def test_wrk_output_without_a_count_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_pgbench_summary() -> None:
    result = parse_pgbench(PGBENCH)
    assert result.tps == pytest.approx(3436.155877)
    assert result.transactions == 10312
    assert result.failed == 0
    assert result.latency_avg_ms == pytest.approx(14.551)
    with pytest.raises(ValueError):
        parse_pgbench("pgbench: error: connection to server failed\n")


def test_pgbench_log_skips_failed_transactions() -> None:
    lines = [
        "0 1 2034 0 1732190000 123456",
        "0 2 1987 0 1732190000 125500",
        "0 3 failed 0 1732190000 1",
        "garbage",
    ]
    assert pgbench_log_latencies_us(lines) == [2034.0, 1987.0]


def test_pgbench_log_keeps_the_transactions_that_ended_in_the_window() -> None:
    lines = ["0 1 900 0 1732190000 999000", "0 2 800 0 1732190001 500000", "1 1 700 0 1732190003 100"]
    assert pgbench_log_latencies_us(lines, window=(1732190001.0, 1732190003.0)) == [800.0]
    assert pgbench_log_latencies_us(lines, window=(1732190000.0, 1732190004.0)) == [900.0, 800.0, 700.0]


def test_proc_stat_with_spaces_and_parentheses_in_the_name() -> None:
    line = (
        "4242 (postgres: postgres (x) idle) S 4200 4200 4200 0 -1 4194560 1500 0 0 0 "
        "37 12 5 3 20 0 1 0 12345 180000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0"
    )
    stat = parse_proc_stat(line)
    assert (stat.pid, stat.comm, stat.state, stat.ppid) == (4242, "postgres: postgres (x) idle", "S", 4200)
    assert (stat.own_ticks, stat.reaped_children_ticks, stat.rss_pages) == (49, 8, 2048)
    assert stat.start_ticks == 12345


def test_cpu_line_busy_and_total() -> None:
    text = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n"
    assert parse_cpu_line(text) == (160, 1000, 0)
    stolen = "cpu  100 5 50 800 40 3 2 25 0 0\n"
    assert parse_cpu_line(stolen) == (185, 1025, 25)
    assert parse_cpu_line("cpu  100 5 50 800\n") == (155, 955, 0)  # old kernels: four fields
    assert parse_cpu_iowait(text) == 40 and parse_cpu_iowait("cpu  100 5 50 800\n") == 0


def test_percentile_and_median() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert median([3.0, None, 1.0, 2.0]) == 2.0
    assert median([None]) is None


def test_env_assignments() -> None:
    assert parse_env_assignments(["QUEEN_PUSH_MAX_BATCH_SIZE=100", "X=a=b", "EMPTY="]) == {
        "QUEEN_PUSH_MAX_BATCH_SIZE": "100",
        "X": "a=b",
        "EMPTY": "",
    }
    with pytest.raises(ValueError):
        parse_env_assignments(["NOVALUE"])


def test_scenario_selection() -> None:
    names = ["push-1-40B", "push-10-40B", "consume-auto", "consume-ack"]
    assert select_names(names, None) == names
    assert select_names(names, "consume-*, push-1-40B") == ["push-1-40B", "consume-auto", "consume-ack"]
    with pytest.raises(ValueError):
        select_names(names, "fanout-*")


def test_lua_literals() -> None:
    assert lua_literal({"a": 1, "b": True, "c": ["x", ""]}) == "{a = 1, b = true, c = {[[x]], [[]]}}"
    assert lua_literal('{"v":"]]"}') == '[=[{"v":"]]"}]=]'


def test_cpu_by_kind_sums_to_the_tree() -> None:
    from queenpy.bench.procfs import TICKS_PER_SECOND, TreeTicks, cpu_by_kind_s

    start = TreeTicks({1: ("postmaster", 5), 2: ("backend", 100), 3: ("autovacuum worker", 40)}, reaped=7)
    # pid 3 exited after 60 ticks in all (20 since start), pid 4 is a backend started in between
    end = TreeTicks({1: ("postmaster", 6), 2: ("backend", 150), 4: ("backend", 30)}, reaped=7 + 60)
    split = {kind: seconds * TICKS_PER_SECOND for kind, seconds in cpu_by_kind_s(start, end).items()}
    assert split == pytest.approx({"postmaster": 1, "backend": 80, "exited": 20})
    total_before = 5 + 100 + 40 + 7
    total_after = 6 + 150 + 30 + 67
    assert sum(split.values()) == pytest.approx(total_after - total_before)
    assert (end.cpu_s - start.cpu_s) * TICKS_PER_SECOND == pytest.approx(total_after - total_before)


def test_a_tree_tracker_keeps_the_cpu_of_children_nobody_waits_for() -> None:
    """A child of a parent that ignores SIGCHLD (as PySpark's worker daemon does) is reaped by the kernel and
    its CPU never reaches the parent's cutime: two snapshots miss it, the tracker's polls keep it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from queenpy.bench.procfs import TreeTracker, cpu_by_kind_s, tree_of, tree_ticks

    program = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    end = time.process_time() + 0.6\n"
        "    while time.process_time() < end: pass\n"
        "    os._exit(0)\n"
        "time.sleep(5)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", program])
    try:
        time.sleep(0.2)  # the child is busy
        start = tree_ticks(parent.pid, lambda pid: "p")
        tracker = TreeTracker(parent.pid, lambda pid: "p", interval_s=0.02).start()
        deadline = time.monotonic() + 20
        while len(tree_of(parent.pid)) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(tree_of(parent.pid)) == 1  # the child has ended, unwaited
        snapshots = cpu_by_kind_s(start, tree_ticks(parent.pid, lambda pid: "p"))
        tracked = tracker.split()
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    assert sum(snapshots.values()) < 0.1  # lost (or negative: what the first snapshot saw of the child)
    assert tracked["exited"] >= 0.25  # about 0.4 s of the child's 0.6 s came after the tracker's start


def test_postgres_cpu_leaves_the_harness_backends_out() -> None:
    """The harness's own backends (application_name queenbench, queenbench-waits) are the measurement: they
    are counted apart, and PostgreSQL's CPU per message is the rest."""
    from queenpy.bench.core import CpuMark, postgres_cpu
    from queenpy.bench.procfs import TICKS_PER_SECOND, MachineCpu, TreeTicks

    def mark(ticks: TreeTicks | None) -> CpuMark:
        return CpuMark(0.0, 0.0, MachineCpu(0.0, 0.0), 0.0, ticks, None)  # type: ignore[arg-type]

    kinds = ("backend:queenpy", "backend:queenbench", "backend:queenbench-waits", "walwriter")
    start = TreeTicks({pid: (kind, 0) for pid, kind in enumerate(kinds)}, reaped=0)
    end = TreeTicks({pid: (kind, ticks) for pid, (kind, ticks) in enumerate(zip(kinds, (300, 20, 5, 10)))}, 0)
    system, harness, by_kind = postgres_cpu(mark(start), mark(end))
    assert system * TICKS_PER_SECOND == pytest.approx(310)
    assert harness * TICKS_PER_SECOND == pytest.approx(25)
    assert {kind for kind, seconds in by_kind.items() if seconds} == set(kinds)
    assert postgres_cpu(mark(None), mark(None))[1:] == (0.0, {})
