"""The accounting of ``queenpy chaos`` (src/queenpy/chaos/load.py, core.py): what counts as acknowledged,
lost, an allowed redelivery and an unexpected duplicate. No processes here: the ledger is fed answers."""

from __future__ import annotations

import collections

from queenpy.chaos.core import Result, fill
from queenpy.chaos.load import Ledger, drain


def test_acknowledged_means_queued_duplicate_or_buffered() -> None:
    ledger = Ledger()
    retry = ledger.record_push(
        ["a", "b", "c", "d", "e"],
        [
            {"status": "queued"},
            {"status": "duplicate"},
            {"status": "buffered"},
            {"status": "failed", "error": "File buffer write failed: No space left on device"},
        ],
    )  # "e": no answer
    assert ledger.acknowledged == {"a", "b", "c"} and ledger.buffered == {"c"}
    assert retry == [3, 4]
    assert ledger.push_failures == {"failed: File buffer write failed: No space left on device": 1}


def test_a_delivery_after_a_confirmed_ack_is_unexpected_other_repeats_are_allowed() -> None:
    ledger = Ledger()
    ledger.record_delivery(["a", "b"])
    ledger.record_delivery(["a", "b"])  # the lease expired before the ack: allowed
    ledger.confirmed.update({"a", "b"})
    ledger.record_delivery(["b"])  # the cursor had moved past b: a real duplicate
    assert ledger.unexpected == {"b": 1}
    assert ledger.redeliveries == 2


def test_fill_counts_lost_duplicates_and_checks_the_store() -> None:
    ledger = Ledger()
    ledger.record_push(["a", "b", "c"], [{"status": "queued"}] * 3)
    ledger.record_delivery(["a", "b"])
    ledger.confirmed.update({"a"})  # b delivered, its ack answer lost: consumed, not lost
    result = Result("unit")
    fill(result, ledger, collections.Counter({"a": 1, "b": 1, "c": 2}))
    assert (result.acknowledged, result.consumed, result.lost) == (3, 2, 1)  # c never delivered
    assert result.unexpected_duplicates == 1  # c stored twice
    assert not result.passed
    assert result.checks == [("every acknowledged id is stored in PostgreSQL (0 missing)", True)]

    missing = Result("unit")
    fill(missing, ledger, collections.Counter({"a": 1}))
    assert missing.checks == [("every acknowledged id is stored in PostgreSQL (2 missing)", False)]


def test_recovery_is_measured_from_the_repair_to_both_a_queued_push_and_a_delivery() -> None:
    ledger = Ledger(queued_at=[1.0, 5.0, 6.0], delivered_at=[2.0, 7.5])
    assert ledger.recovery_s(4.0) == 3.5  # queued again at 5.0, delivering again at 7.5
    assert ledger.recovery_s(4.0, pops=False) == 1.0
    assert ledger.recovery_s(8.0) is None


async def test_the_drain_waits_while_consumers_make_progress_and_stops_when_they_stall() -> None:
    left = [5]

    def consume_one() -> int:  # one message per look: slow but steady
        left[0] = max(0, left[0] - 1)
        return left[0]

    await drain(consume_one, stall_s=0.5, cap_s=60)
    assert left[0] == 0
    await drain(lambda: 3, stall_s=0.5, cap_s=60)  # stuck: returns with 3 left instead of waiting for the cap
