"""Crash test of the pipeline handoffs (issue 3, "what it must show" 2).

The translate, route and notify stages of ``examples/pipeline.py`` run as separate processes
(``examples/pipeline_worker.py``) against the session broker. While the 100 messages flow, stage workers are
SIGKILLed at points chosen by a seeded RNG (the plan is printed; ``QUEENPY_CRASH_SEED`` overrides the seed):
each kill waits until its stage has done a random fraction of its work and, when it can, until a handler of
that stage is in flight, then kills after a random jitter; the stage is restarted after a random pause. At
least 4 kills, every stage at least once.

What must hold afterwards, exactly, is read from PostgreSQL (``queen.messages``, ``queen.dead_letter_queue``,
the queue-mode cursors) and the broker API, not from the workers' memory (a SIGKILL loses that):

* 100 produced; ``chat.route`` holds exactly the 86 healthy messages and ``chat.notify`` exactly the 86 routed
  ones, each source id ``n`` once, in its chat's partition (0 duplicates downstream, nothing lost);
* every message of all three queues is consumed (cursor at the partition's end, depth 0);
* 14 dead letters, all in ``chat.translate`` and exactly the poisoned messages; none in route or notify;
* no worker ever logged the same handoff (``translated N`` / ``routed N``) twice.

Why the attempt counts can grow: a killed handler's message is not acked, so the broker redelivers it once
the partition lease (``leaseTime``) expires, and the new worker runs the handler again. Lease expiry is not a
retry (API.md 5.5), so a poisoned message still gets exactly ``RETRY_LIMIT + 1`` counted failures before the
DLQ. Hence ``128 <= translate attempts <= 128 + interrupted`` and
``42 - interrupted <= logged failures <= 42``, where "interrupted" counts handler runs that a kill cut short
(a ``begin`` without its outcome line). The notify stage is the end of the line: it acks after its handler,
outside any transaction, so a kill between the notification and its ack makes the redelivered message notify a
second time (at-least-once); its extra notifications are bounded by its concurrency (2) per notify kill, and
every healthy message is notified.

``leaseTime`` is 3 s here (the example uses 8 s) to keep redelivery after a kill quick; handlers take
50-150 ms so that kills find work in flight.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from queenpy.client import Queen

from helpers import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKER = EXAMPLES / "pipeline_worker.py"

SEED = int(os.environ.get("QUEENPY_CRASH_SEED", "20260603"))
LEASE_TIME_S = 3
WORK_MS = "50:150"
STAGES = ("translate", "route", "notify")
CONCURRENCY = {"translate": 4, "route": 2, "notify": 2}  # as in pipeline.py / pipeline_worker.py
#: log lines that end a handler run, per stage
OUTCOMES = {"translate": ("translated", "failed"), "route": ("routed",), "notify": ("notified",)}


def load_pipeline() -> Any:
    spec = importlib.util.spec_from_file_location("pipeline_example", EXAMPLES / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@dataclass
class Run:
    """One incarnation of a stage worker: its process and event log."""

    stage: str
    process: subprocess.Popen[bytes]
    log: Path
    err: Path
    killed: bool = False

    def events(self) -> list[tuple[str, int, list[str]]]:
        """``(event, n, rest)`` per complete log line."""
        text = self.log.read_text() if self.log.exists() else ""
        lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        return [(parts[0], int(parts[1]), parts[2:]) for parts in (line.split() for line in lines)]

    def in_flight(self) -> list[int]:
        """Messages whose handler began in this run and has not logged its outcome (yet, or ever)."""
        open_runs: Counter[int] = Counter()
        for event, n, _ in self.events():
            if event == "begin":
                open_runs[n] += 1
            elif event in OUTCOMES[self.stage]:
                open_runs[n] -= 1
        return sorted(n for n, count in open_runs.items() if count > 0)


@dataclass
class Stages:
    """The workers of the three stages, with every past incarnation kept for the final accounting."""

    url: str
    suffix: str
    tmp: Path
    runs: dict[str, list[Run]] = field(default_factory=lambda: {stage: [] for stage in STAGES})

    def start(self, stage: str) -> Run:
        index = len(self.runs[stage])
        log, err = self.tmp / f"{stage}.{index}.log", self.tmp / f"{stage}.{index}.err"
        with open(err, "wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    stage,
                    "--url",
                    self.url,
                    "--suffix",
                    self.suffix,
                    "--log",
                    str(log),
                    "--work-ms",
                    WORK_MS,
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        run = Run(stage, process, log, err)
        self.runs[stage].append(run)
        return run

    def current(self, stage: str) -> Run:
        return self.runs[stage][-1]

    def events(self, stage: str) -> list[tuple[str, int, list[str]]]:
        return [event for run in self.runs[stage] for event in run.events()]

    def progress(self, stage: str) -> int:
        """Handler runs of ``stage`` that logged their outcome, over all incarnations."""
        return sum(event in OUTCOMES[stage] for event, _, _ in self.events(stage))

    def check_alive(self) -> None:
        for stage in STAGES:
            run = self.current(stage)
            if run.process.poll() is not None:
                raise AssertionError(
                    f"{stage} worker exited {run.process.returncode}:\n{run.err.read_text()}"
                )

    def stderr(self) -> str:
        return "\n".join(
            f"--- {run.err.name}\n{run.err.read_text()[-2000:]}"
            for runs in self.runs.values()
            for run in runs
        )

    def stop_all(self) -> None:
        for runs in self.runs.values():
            for run in runs:
                if run.process.poll() is None:
                    run.process.send_signal(signal.SIGTERM)
        for runs in self.runs.values():
            for run in runs:
                try:
                    run.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    run.process.kill()
                    run.process.wait()


@dataclass
class Kill:
    stage: str
    fraction: float  # of the stage's handler runs done (translate 128, route 86, notify 86) before the kill
    jitter_ms: float
    down_s: float


def kill_plan(rng: random.Random) -> list[Kill]:
    """Every stage once plus one more at random, at random fractions of their work, earliest first."""
    stages = [*STAGES, rng.choice(STAGES)]
    kills = [Kill(stage, rng.uniform(0.1, 0.75), rng.uniform(0, 60), rng.uniform(0, 0.5)) for stage in stages]
    return sorted(kills, key=lambda kill: kill.fraction)


def queue_rows(conn: psycopg.Connection[Any], queue: str) -> list[tuple[str, str, Any]]:
    """``(transaction_id, partition, payload)`` of every message stored in ``queue``."""
    return conn.execute(
        """SELECT m.transaction_id, p.name, m.payload FROM queen.messages m
           JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
           WHERE q.name = %s ORDER BY p.name, m.seq""",
        (queue,),
    ).fetchall()


def unconsumed(conn: psycopg.Connection[Any], queue: str) -> int:
    """Messages of ``queue`` after the queue-mode cursor of their partition (acked or dead-lettered ones are
    behind it)."""
    row = conn.execute(
        """SELECT COALESCE(sum(p.last_seq - COALESCE(pc.last_consumed_seq, 0)), 0) FROM queen.partitions p
           JOIN queen.queues q ON q.id = p.queue_id
           LEFT JOIN queen.partition_consumers pc
                  ON pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'
           WHERE q.name = %s""",
        (queue,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def dead_letters(conn: psycopg.Connection[Any], queue: str) -> list[tuple[str, str]]:
    """``(transaction_id, error_message)`` of the DLQ rows of ``queue``."""
    return conn.execute(
        """SELECT m.transaction_id, d.error_message FROM queen.dead_letter_queue d
           JOIN queen.messages m ON m.id = d.message_id JOIN queen.partitions p ON p.id = d.partition_id
           JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s ORDER BY m.transaction_id""",
        (queue,),
    ).fetchall()


def test_sigkilled_stage_workers_lose_and_duplicate_nothing(broker: Any, tmp_path: Path) -> None:
    pipeline = load_pipeline()
    expected = pipeline.Counts.expected(100)
    assert expected["translate_attempts"] == 128 and expected["routed"] == 86  # the numbers
    poisoned = [n for n in range(1, 101) if n % pipeline.POISON_EVERY == 0]
    healthy = [n for n in range(1, 101) if n % pipeline.POISON_EVERY != 0]
    totals = {
        "translate": expected["translate_attempts"],
        "route": expected["routed"],
        "notify": expected["notified"],
    }
    suffix = f".crash-{uuid.uuid4().hex[:8]}"
    names = {stage: f"chat.{stage}{suffix}" for stage in STAGES}
    rng = random.Random(SEED)
    plan = kill_plan(rng)
    print(
        f"crash plan (seed {SEED}): "
        + ", ".join(f"{k.stage}@{k.fraction:.0%}+{k.jitter_ms:.0f}ms (down {k.down_s:.2f}s)" for k in plan)
    )
    started = time.monotonic()

    setup = subprocess.run(
        [
            sys.executable,
            str(WORKER),
            "setup",
            "--url",
            broker.url,
            "--suffix",
            suffix,
            "--lease-time",
            str(LEASE_TIME_S),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert setup.returncode == 0, setup.stderr
    assert json.loads(setup.stdout) == {"produced": 100, "poisoned": 14}

    stages = Stages(broker.url, suffix, tmp_path)
    done_kills: list[str] = []
    try:
        for stage in STAGES:
            stages.start(stage)
        for kill in plan:
            threshold = kill.fraction * totals[kill.stage]

            def reached(stage: str = kill.stage, threshold: float = threshold) -> bool:
                stages.check_alive()
                return stages.progress(stage) >= threshold

            wait_until(
                reached, timeout_s=45, interval_s=0.01, message=f"{kill.stage} progress {kill.fraction:.0%}"
            )
            run = stages.current(kill.stage)
            deadline = time.monotonic() + 2
            while not run.in_flight() and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(kill.jitter_ms / 1000)
            run.process.send_signal(signal.SIGKILL)
            run.process.wait(timeout=10)
            run.killed = True
            interrupted = run.in_flight()
            done_kills.append(
                f"{kill.stage} pid {run.process.pid} after {stages.progress(kill.stage)} "
                f"handler runs, interrupted {interrupted or 'nothing'}"
            )
            print("killed", done_kills[-1])
            time.sleep(kill.down_s)
            stages.start(kill.stage)

        # -- until everything is consumed: cursors at the end, the 86 notifications stored and acked ---------
        with psycopg.connect(broker.database_url, autocommit=True) as conn:

            def finished() -> bool:
                stages.check_alive()
                counts = {stage: len(queue_rows(conn, name)) for stage, name in names.items()}
                return counts == {"translate": 100, "route": 86, "notify": 86} and all(
                    unconsumed(conn, name) == 0 for name in names.values()
                )

            wait_until(finished, timeout_s=45, interval_s=0.1, message="pipeline to drain")
            drained_s = time.monotonic() - started
            stages.stop_all()
            for runs in stages.runs.values():
                for run in runs:
                    if not run.killed:
                        assert run.process.returncode == 0, stages.stderr()
                        assert run.in_flight() == [], f"{run.log.name} stopped with handlers in flight"

            # -- the queues: each handoff exactly once, in its chat's partition, nothing lost ----------------
            translate_rows = queue_rows(conn, names["translate"])
            assert sorted(tx for tx, _, _ in translate_rows) == sorted(f"msg-{n}" for n in range(1, 101))
            route_rows = queue_rows(conn, names["route"])
            assert sorted((payload["n"], tx, partition) for tx, partition, payload in route_rows) == [
                (n, f"msg-{n}.translated", f"chat-{n % 10}") for n in healthy
            ]
            assert all(payload["text"] == f"hola {payload['n']}" for _, _, payload in route_rows)
            notify_rows = queue_rows(conn, names["notify"])
            assert sorted((payload["n"], tx, partition) for tx, partition, payload in notify_rows) == [
                (n, f"msg-{n}.translated.routed", f"chat-{n % 10}") for n in healthy
            ]
            assert all(payload["route"] == f"push:chat-{payload['n'] % 10}" for _, _, payload in notify_rows)
            assert len({payload["n"] for _, _, payload in notify_rows}) == 86  # 0 duplicates downstream

            # -- the DLQ: the 14 poisoned messages of chat.translate, nothing else ---------------------------
            assert dead_letters(conn, names["translate"]) == sorted(
                (f"msg-{n}", f"cannot translate message {n}") for n in poisoned
            )
            assert dead_letters(conn, names["route"]) == [] and dead_letters(conn, names["notify"]) == []
            assert all(unconsumed(conn, name) == 0 for name in names.values())

        httpx.post(f"{broker.url}/api/v1/stats/refresh", timeout=60)  # counts come from the stats job
        with Queen(broker.url) as q:
            assert q.queue(names["translate"]).dlq().limit(1000).get().total == 14
            for name in names.values():
                totals_now = q.describe_queue(name)["totals"]
                assert (totals_now["pending"], totals_now["processing"]) == (0, 0), (name, totals_now)

        # -- the workers' own accounts: bounded by what the kills interrupted --------------------------------
        interrupted = {stage: sum(len(run.in_flight()) for run in stages.runs[stage]) for stage in STAGES}
        kills = Counter(run.stage for runs in stages.runs.values() for run in runs if run.killed)
        translate_events = stages.events("translate")
        attempts = Counter(n for event, n, _ in translate_events if event == "begin")
        failures = [n for event, n, _ in translate_events if event == "failed"]
        translated = Counter(n for event, n, _ in translate_events if event == "translated")
        routed = Counter(n for event, n, _ in stages.events("route") if event == "routed")
        notified = Counter(n for event, n, _ in stages.events("notify") if event == "notified")
        summary = (
            f"kills {dict(kills)}, interrupted {interrupted}, translate attempts "
            f"{sum(attempts.values())}, failures {len(failures)}, translated {sum(translated.values())}, "
            f"routed {sum(routed.values())}, notifications {sum(notified.values())}, drained in "
            f"{drained_s:.1f}s"
        )
        print(summary)
        assert len(done_kills) >= 3 and set(kills) == set(STAGES), summary
        assert 128 <= sum(attempts.values()) <= 128 + interrupted["translate"], summary
        assert all(attempts[n] >= 1 for n in healthy) and all(attempts[n] >= 3 for n in poisoned), summary
        assert 42 - interrupted["translate"] <= len(failures) <= 42, summary
        assert set(failures) <= set(poisoned) and max(Counter(failures).values()) <= 3, summary
        assert max(translated.values()) == 1 and set(translated) <= set(healthy), summary
        assert max(routed.values()) == 1 and set(routed) <= set(healthy), summary
        assert sum(translated.values()) >= 86 - interrupted["translate"], summary
        assert sum(routed.values()) >= 86 - interrupted["route"], summary
        assert sorted(notified) == healthy, summary  # every healthy message notified ...
        extra = sum(notified.values()) - 86  # ... and again only if a kill came between notifying and acking
        assert 0 <= extra <= CONCURRENCY["notify"] * kills["notify"], summary
    except AssertionError:
        print(stages.stderr())  # shown with the failure
        raise
    finally:
        stages.stop_all()
