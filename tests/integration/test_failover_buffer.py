"""The failover buffer file format and replay against the real push procedure."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import psycopg

from queenpy.engine.failover import FailoverBuffer, read_events

from helpers import call_procedure


def test_replay_is_deduplicated_and_a_torn_record_is_ignored(db_url: str, tmp_path: Path) -> None:
    conn = psycopg.connect(db_url, autocommit=True)

    async def push(items: list[dict[str, Any]]) -> list[Any]:
        return call_procedure(conn, "push_items_v1", items)  # type: ignore[no-any-return]

    async def scenario() -> None:
        buffer = FailoverBuffer(tmp_path / "buf", push, max_batch=3, events_per_file=4)
        results = await buffer.append([{"queue": "fo", "partition": "a", "payload": n} for n in range(6)])
        assert [r["status"] for r in results] == ["buffered"] * 6
        assert all(r["transactionId"] for r in results)  # generated now, so replays dedupe
        finished = sorted((tmp_path / "buf").glob("*.buf"))
        assert len(finished) == 1 and len(read_events(finished[0])) == 6  # full after 4: finalised
        keep = tmp_path / "copy.buf"
        shutil.copy(finished[0], keep)
        assert await buffer.drain_once() == 6
        # the same file again (a drain that died after storing part of it): nothing is stored twice
        shutil.copy(keep, tmp_path / "buf" / "failover_again.buf")
        assert await buffer.drain_once() == 6
        # a torn record at the end (crash in the middle of a write) is ignored, the rest replayed
        torn = tmp_path / "buf" / "failover_torn.buf"
        data = keep.read_bytes()
        torn.write_bytes(data[:-5])
        assert len(read_events(torn)) == 5
        await buffer.drain_once()
        await buffer.stop()

    asyncio.run(scenario())
    rows = conn.execute("SELECT payload FROM queen.messages ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == list(range(6))
    conn.close()
