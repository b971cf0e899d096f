"""The failover buffer on a disk that fills up: nothing answered ``buffered`` may be missing from the file.

Found by ``queenpy chaos`` (scenario buffer-unwritable, 64 KiB tmpfs): the append wrote its record with one
unchecked ``write``; when the disk filled in the middle of a record the write was short, no error was
raised, and the whole push was answered ``buffered`` with only part of it on disk (20 acknowledged messages
lost in the run). The disk filling up is real here: the buffer runs in a child process whose file size
limit (``RLIMIT_FSIZE``, no privilege needed) ends the file after a few records, as ENOSPC would: the write
that crosses the limit is short, the next fails with EFBIG (Python ignores SIGXFSZ).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from queenpy.engine.failover import read_events

CHILD = r"""
import asyncio, json, sys
from queenpy.engine.failover import FailoverBuffer

async def push(items):
    raise AssertionError("no database here")

async def main():
    buffer = FailoverBuffer(sys.argv[1], push, events_per_file=1_000_000)
    answered, refused = [], 0
    for batch in range(60):
        items = [{"queue": "q", "partition": "p", "payload": "x" * 300, "transactionId": f"{batch}-{n}"}
                 for n in range(7)]
        try:
            results = await buffer.append(items)
        except OSError as exc:
            refused += 1
            last_error = exc.strerror
            continue
        answered += [r["transactionId"] for r in results if r["status"] == "buffered"]
    await buffer.stop()
    print(json.dumps({"buffered": answered, "refused": refused, "error": last_error if refused else None}))

asyncio.run(main())
"""

LIMIT_BYTES = 20_000  # about 8 batches of 7 records of ~350 bytes: the limit falls inside a record


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))


def test_a_push_cut_short_by_a_full_disk_is_refused_and_the_file_keeps_whole_records(tmp_path: Path) -> None:
    directory = tmp_path / "buffers"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["refused"] > 0 and outcome["error"] == "File too large"  # the disk did fill up
    assert len(outcome["buffered"]) >= 7
    files = list(directory.glob("failover_*"))
    on_disk = [event["transactionId"] for path in files for event in read_events(path)]
    # every push answered `buffered` is on disk, whole; nothing refused is
    assert on_disk == outcome["buffered"]
    assert sum(path.stat().st_size for path in files) < LIMIT_BYTES  # the partial record was cut off
