"""Building typed client objects from the broker's JSON, without a broker."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from queenpy.client import DeadLetter, Message, PushResult
from queenpy.client._messages import parse_timestamp, uuid7
from queenpy.client._wire import ack_status, format_push_item, format_timestamp, message_reference

POPPED = {
    "id": "0190c6b2-1f2e-7a00-8000-000000000001",
    "transactionId": "t-1",
    "traceId": None,
    "data": {"text": "hello", "n": 1},
    "producerSub": None,
    "createdAt": "2026-04-26T10:59:28.267966Z",
    "partitionId": "6f1c1d3e-0000-4000-8000-000000000000",
    "partition": "chat-1",
    "leaseId": "0190c6b2-1f2e-7a00-8000-00000000abcd",
    "consumerGroup": "__QUEUE_MODE__",
}


def test_message_from_pop_item_keeps_every_field() -> None:
    message = Message.from_wire(POPPED, queue="chat.translate")
    assert message.id == POPPED["id"]
    assert message.transaction_id == "t-1"
    assert message.partition_id == POPPED["partitionId"]
    assert message.partition == "chat-1"
    assert message.queue == "chat.translate"
    assert message.consumer_group == "__QUEUE_MODE__"
    assert message.lease_id == POPPED["leaseId"]
    assert message.data == {"text": "hello", "n": 1}
    assert message.created_at == datetime(2026, 4, 26, 10, 59, 28, 267966, tzinfo=UTC)
    assert message.trace_id is None and message.producer_sub is None


def test_auto_ack_message_has_no_lease_and_takes_the_group_of_the_response() -> None:
    item = {key: value for key, value in POPPED.items() if key != "consumerGroup"} | {"leaseId": ""}
    message = Message.from_wire(item, queue="q", consumer_group="billing")
    assert message.lease_id is None
    assert message.consumer_group == "billing"


def test_message_without_partition_id_is_refused() -> None:
    with pytest.raises(ValueError, match="partitionId"):
        Message.from_wire({"transactionId": "t"}, queue="q")


def test_message_round_trips_to_the_wire_shape() -> None:
    wire = Message.from_wire(POPPED, queue="q").to_wire()
    assert wire["transactionId"] == "t-1" and wire["queue"] == "q"
    assert wire["createdAt"] == "2026-04-26T10:59:28.267966Z"
    assert Message.from_wire(wire) == Message.from_wire(POPPED, queue="q")


def test_push_result_reads_snake_case_keys_and_falls_back_to_what_was_sent() -> None:
    sent = {"queue": "q", "partition": "p", "transactionId": "t-9", "payload": 1}
    queued = PushResult.from_wire(
        {
            "index": 4,
            "transaction_id": "t-9",
            "status": "queued",
            "message_id": "m",
            "partition_id": "pid",
            "trace_id": None,
            "queueName": "q",
        },
        sent,
    )
    assert (queued.status, queued.transaction_id, queued.message_id, queued.partition_id) == (
        "queued",
        "t-9",
        "m",
        "pid",
    )
    assert queued.partition == "p" and queued.ok
    failed = PushResult.from_wire({"status": "failed", "error": "queue full"}, sent)
    assert not failed.ok and failed.error == "queue full" and failed.transaction_id == "t-9"


def test_dead_letter_row_parses_times_and_counts() -> None:
    row = DeadLetter.from_wire(
        {
            "id": "m",
            "transactionId": "t",
            "partitionId": "p",
            "queue": "q",
            "partition": "Default",
            "consumerGroup": "__QUEUE_MODE__",
            "errorMessage": "boom",
            "retryCount": 2,
            "data": {"x": 1},
            "createdAt": "2026-05-01T00:00:00.000Z",
            "failedAt": "2026-05-01T00:00:01.500Z",
        }
    )
    assert row.retry_count == 2 and row.error_message == "boom" and row.data == {"x": 1}
    assert row.failed_at is not None and row.created_at is not None
    assert (row.failed_at - row.created_at).total_seconds() == 1.5
    assert row.to_wire()["failedAt"] == "2026-05-01T00:00:01.500Z"


def test_timestamps() -> None:
    assert parse_timestamp(None) is None and parse_timestamp("garbage") is None
    assert parse_timestamp("2026-01-02T03:04:05.678Z") == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 678000)) == "2026-01-02T03:04:05.678Z"
    assert format_timestamp("now") == "now"


def test_uuid7_is_version_7_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(200)]
    assert all(uuid.UUID(value).version == 7 for value in ids)
    assert len(set(ids)) == 200
    prefixes = [value[:13] for value in ids]  # 48-bit millisecond prefix
    assert prefixes == sorted(prefixes)


def test_push_items_follow_the_reference_client() -> None:
    plain = format_push_item({"text": "hi"}, "q", "p")
    assert plain["payload"] == {"text": "hi"} and plain["queue"] == "q" and plain["partition"] == "p"
    assert uuid.UUID(plain["transactionId"]).version == 7
    wrapped = format_push_item({"data": [1, 2], "transactionId": "t-1"}, "q", None)
    assert wrapped == {"queue": "q", "payload": [1, 2], "transactionId": "t-1"}
    assert format_push_item({"data": None}, "q", None)["payload"] is None
    assert format_push_item("just text", "q", None)["payload"] == "just text"
    trace = str(uuid.uuid4())
    assert format_push_item({"data": 1, "traceId": trace}, "q", None)["traceId"] == trace
    with pytest.raises(ValueError, match="traceId"):
        format_push_item({"data": 1, "traceId": "not-a-uuid"}, "q", None)


def test_ack_references_and_statuses() -> None:
    message = Message.from_wire(POPPED, queue="q")
    assert message_reference(message) == ("t-1", POPPED["partitionId"], POPPED["leaseId"], "__QUEUE_MODE__")
    assert message_reference(POPPED)[:2] == ("t-1", POPPED["partitionId"])
    with pytest.raises(ValueError):
        message_reference({"transactionId": "t"})
    assert (ack_status(True), ack_status(False), ack_status("retry")) == ("completed", "failed", "retry")
