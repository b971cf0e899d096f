"""The scale bench's measurement of retention's vacuum (``scale._autovacuum``, issue 44) against a real
PostgreSQL: while the bench holds autovacuum of queen.messages off the table says so; let go, autovacuum
vacuums the dead rows left meanwhile, and the step sees its vacuum start and end in
``pg_stat_progress_vacuum`` and tells the push windows beside it which phase it is in. The test server keeps
PostgreSQL's ``autovacuum_naptime`` (60 s), so the test waits up to a minute for autovacuum to come."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from queenpy.bench.kinds import scale
from queenpy.bench.postgres import Sql

AUTOVACUUMS = """
SELECT autovacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'queen.messages'::regclass
"""
OPTIONS = "SELECT reloptions::text FROM pg_class WHERE oid = 'queen.messages'::regclass"


def test_the_step_follows_the_autovacuum_the_hold_kept_back(db_url: str) -> None:
    sql = Sql(db_url)
    context: Any = SimpleNamespace(sql=sql, log=lambda line: None)
    try:
        # slow enough to be seen by polls 0.1 s apart (about 1 s here): a sleep of 2 ms after every 5 cost
        # units (a page found in shared buffers costs 1), where migration 030 allows 1,000
        sql.execute(f"ALTER TABLE {scale.VACUUMED} SET (autovacuum_vacuum_cost_limit = 5)")
        scale._seed(context, "vacuum-held", 1_000, scale.STORED)  # 10,000 messages
        sql.execute("ANALYZE queen.messages")
        sql.execute(scale.HOLD_AUTOVACUUM)
        sql.execute("DELETE FROM queen.messages")
        time.sleep(1.5)  # an idle backend's counts reach the statistics within a second
        before = sql.fetchrow(AUTOVACUUMS)
        assert "autovacuum_enabled=off" in sql.fetchval(OPTIONS)

        started, progress, seen = threading.Event(), {}, []
        answer: dict[str, Any] = {}
        step = threading.Thread(target=lambda: answer.update(scale._autovacuum(sql, started, progress)))
        step.start()
        while not started.wait(0.05) and step.is_alive():  # up to two naptimes and 30 s
            pass
        while step.is_alive():  # what a push window beside the vacuum records at its start and end
            seen.append(dict(progress))
            time.sleep(0.02)
        step.join()
        vacuum = answer
        assert started.is_set()
        assert vacuum["vacuumed"] and vacuum["relation"] == "queen.messages"
        assert vacuum["phases"][0] == "scanning heap"
        assert [phase for phase, _ in vacuum["phase_s"]] == vacuum["phases"]
        assert vacuum["phase_s"][0][1] == 0.0
        assert all(a[1] <= b[1] for a, b in zip(vacuum["phase_s"], vacuum["phase_s"][1:]))
        # from the window's first look on, the phase the vacuum was in; None once it has gone
        assert seen[0]["phase"] == "scanning heap"
        assert {entry["phase"] for entry in seen if entry["phase"]} <= set(vacuum["phases"])
        assert all(entry["heap_blks_scanned"] >= 0 for entry in seen if entry["phase"])
        assert progress == {"phase": None, "heap_blks_scanned": None}
        assert 0 < vacuum["dead_tuples"] <= 10_000 and vacuum["heap_blks_total"] > 0
        assert vacuum["vacuum_s"] > 0
        # what autovacuum owed the table when the step let it go: the seed's rows inserted, none vacuumed
        assert vacuum["debt"]["n_ins_since_vacuum"] >= 10_000
        assert vacuum["debt"]["autovacuum_count"] == before["autovacuum_count"]
        time.sleep(1.5)  # the worker's counts reach the statistics when it exits
        after = sql.fetchrow(AUTOVACUUMS)
        assert after["autovacuum_count"] > before["autovacuum_count"]
        assert after["n_dead_tup"] == 0
        assert "autovacuum_enabled" not in sql.fetchval(OPTIONS)  # let go: the server's setting again
    finally:
        sql.close()
