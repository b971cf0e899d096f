"""The Queen Streams scenario: a tumbling-window count per partition through ``/streams/v1/cycle``, driven
the way the Streams SDK's runner drives it (``lua/streams.lua``: pop, state/get, cycle), over the shared
backlog. PostgreSQL is the ground truth: the consumer group's cursors count the messages, its
``total_batches_consumed`` the cycles (each cycle acks its batch and releases the lease), and the sink's rows
the emitted windows. Exactly once is checked at the end: the emitted counts plus the open windows' counts in
``queen_streams.state`` equal the messages the cursors passed.
"""

from __future__ import annotations

import json
from typing import Any

from queenpy.bench.catalog import Scenario
from queenpy.bench.core import Q_CHECKPOINTS, Q_QUEUE_ROWS
from queenpy.bench.kinds.consume import ConsumeRuns
from queenpy.bench.wrk import render_script, run_wrk

__all__ = ["StreamsRuns"]

Q_CYCLES = ("SELECT coalesce(sum(pc.last_consumed_seq), 0)::bigint, coalesce(sum(pc.total_batches_consumed), 0)::bigint "
            "FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND pc.consumer_group = $2")
Q_EMITTED = ("SELECT count(*), coalesce(sum((m.payload->>'count')::bigint), 0)::bigint FROM queen.messages m "
             "WHERE m.partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
             "WHERE q.name = $1)")
Q_OPEN = ("SELECT coalesce(sum((s.value->>'acc')::bigint), 0)::bigint FROM queen_streams.state s "
          "JOIN queen_streams.queries q ON q.id = s.query_id WHERE q.name = $1 AND s.key LIKE 'tumb:%'")


class StreamsRuns(ConsumeRuns):
    def _register(self, name: str, source: str, sink: str) -> str:
        """Register the query (as the SDK's runner does at start) and return its id."""
        result = json.loads(self.sql.fetchval("SELECT queen.streams_register_v1($1::jsonb)::text", json.dumps(
            {"name": name, "source_queue": source, "sink_queue": sink, "config_hash": "bench-tumbling"})))
        return str(result["query_id"])

    def _run_streams(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        estimate = self.estimates.get(scenario.name, scenario.initial_rate)
        need = int(estimate * max(options.seconds, options.warmup) * 1.3) + scenario.batch * scenario.connections
        backlog = self._backlog(scenario, need)
        queue = backlog.queue
        name = f"{scenario.name}-r{round_no}"
        sink = f"{queue}-{name}-sink"
        self._precreate(sink, scenario.partitions)
        sink_rows0 = int(self.sql.fetchval(Q_QUEUE_ROWS, sink))  # the precreated rows

        def script_for(query: str, target: str) -> Any:
            return render_script("streams", {
                "queue": queue, "group": f"streams.{query}", "batch": scenario.batch,
                "timeout_ms": options.long_poll_ms, "query_id": self._register(query, queue, target),
                "sink": target, "window_ms": scenario.batch}, self.workdir)

        timeout_s = options.long_poll_ms / 1000 + 10
        self._checkpoint()
        if options.warmup > 0:
            self._precreate(sink + "-warm", scenario.partitions)
            warm = run_wrk(self.broker.url, script_for(f"warm-{name}", sink + "-warm"), scenario.connections,
                           options.warmup, scenario.threads, timeout_s)
            self._check_wrk(run, warm, "warm-up")

        group = f"streams.{name}"
        script = script_for(name, sink)

        def truth() -> tuple[int, int, int]:
            consumed, cycles = self.sql.fetchrow(Q_CYCLES, queue, group)
            return int(consumed), int(cycles), int(self.sql.fetchval(Q_QUEUE_ROWS, sink)) - sink_rows0

        consumed0, cycles0, emitted0 = truth()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        measured = run_wrk(self.broker.url, script, scenario.connections, options.seconds, scenario.threads,
                           timeout_s)
        consumed1, cycles1, emitted1 = truth()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._check_wrk(run, measured, "measured")
        self._fill_window(run, consumed1 - consumed0, start, end, [measured], measured, checkpoints)
        window = end.at - start.at
        cycles, emitted = cycles1 - cycles0, emitted1 - emitted0
        run["streams"] = {"cycles_per_s": cycles / window if window > 0 else 0.0,
                          "windows_emitted_per_s": emitted / window if window > 0 else 0.0,
                          "messages_per_cycle": (consumed1 - consumed0) / cycles if cycles else None}

        consumed2, cycles2, emitted2 = self._settled(truth)
        counters = measured.result.counters
        client_cycles, client_acked = int(counters.get("cycles_ok", 0)), int(counters.get("acked", 0))
        client_emitted = int(counters.get("emitted", 0))
        emitted_rows, emitted_count = self.sql.fetchrow(Q_EMITTED, sink)
        open_count = int(self.sql.fetchval(Q_OPEN, name))
        run["ground_truth"].update({
            "consumed_in_window": consumed1 - consumed0, "cycles_in_window": cycles,
            "emitted_in_window": emitted, "consumed_after_settle": consumed2 - consumed0,
            "cycles_after_settle": cycles2 - cycles0, "client_cycles": client_cycles, "client_acked": client_acked,
            "client_emitted": client_emitted, "sink_window_counts": int(emitted_count),
            "open_window_counts": open_count, "cursor_total": consumed2})
        slack = scenario.connections  # cycles in flight when wrk stops: committed, the answer never read
        if not client_cycles <= cycles2 - cycles0 <= client_cycles + slack:
            run["problems"].append(f"cycles: the client counted {client_cycles}, PostgreSQL {cycles2 - cycles0}")
        if not client_acked <= consumed2 - consumed0 <= client_acked + slack * scenario.batch:
            run["problems"].append(f"acks: the client counted {client_acked}, cursors advanced {consumed2 - consumed0}")
        if not client_emitted <= emitted2 - emitted0 <= client_emitted + slack:
            run["problems"].append(f"emitted: the client counted {client_emitted}, the sink got {emitted2 - emitted0}")
        # exactly once: every message the cursors passed is in one emitted window or in an open one (the
        # precreated message of each sink partition counts 0: its payload has no count)
        if int(emitted_count) + open_count != consumed2:
            run["problems"].append(f"not exactly once: {int(emitted_count)} in emitted windows + {open_count} in "
                                   f"open windows != {consumed2} consumed")
        if int(emitted_rows) - sink_rows0 != emitted2:
            run["problems"].append(f"sink rows {int(emitted_rows) - sink_rows0} != {emitted2} by offsets")
        available = int(self.sql.fetchval(Q_QUEUE_ROWS, queue))
        if available - consumed1 <= scenario.batch * scenario.connections:
            run["notes"].append("backlog drained during the window: the rate is a lower bound")
            self.estimates[scenario.name] = estimate * 2
        else:
            self.estimates[scenario.name] = max(estimate, run["msg_per_s"] * 1.2)
        return run
