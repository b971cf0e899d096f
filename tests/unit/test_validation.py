"""Edge validation: clean items out, InvalidRequest with a message naming the field otherwise."""

from __future__ import annotations

import pytest

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v


def test_push_items_are_cleaned_and_producer_sub_never_comes_from_the_body() -> None:
    items = v.validate_push(
        {
            "items": [
                {
                    "queue": "q",
                    "payload": {"a": 1},
                    "producerSub": "forged",
                    "transactionId": "",
                    "traceId": "6F1E1B1C-0000-4000-8000-000000000000",
                }
            ]
        },
        producer_sub="alice",
    )
    assert items == [
        {
            "queue": "q",
            "partition": "Default",
            "payload": {"a": 1},
            "producerSub": "alice",
            "traceId": "6f1e1b1c-0000-4000-8000-000000000000",
        }
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "items array is required"),
        ({"items": {}}, "items array is required"),
        ({"items": [1]}, "items[0] must be an object"),
        ({"items": [{"queue": 5}]}, "Queue must be a string"),
        ({"items": [{"queue": ""}]}, "items[0].queue must not be empty"),
        ({"items": [{"queue": "q" * 256}]}, "items[0].queue is longer than 255 characters"),
        ({"items": [{"queue": "q", "partition": 1}]}, "Partition must be a string"),
        ({"items": [{"queue": "q", "transactionId": 1}]}, "TransactionId must be a string"),
        ({"items": [{"queue": "q", "traceId": "nope"}]}, "items[0].traceId must be a UUID"),
        ({"items": [{"queue": "q", "payload": {"k": "a\u0000b"}}]}, "NUL character"),
    ],
)
def test_push_rejects_bad_items(body: object, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        v.validate_push(body)


def test_empty_and_malformed_bodies() -> None:
    with pytest.raises(InvalidRequest, match="Empty request body"):
        v.parse_body(b"")
    with pytest.raises(InvalidRequest, match="Invalid JSON"):
        v.parse_body(b"{nope")
    assert v.parse_body(b"", allow_empty=True) == {}


def test_ack_validation() -> None:
    assert v.validate_ack({"transactionId": "t", "partitionId": "00000000-0000-0000-0000-000000000001"}) == {
        "transactionId": "t",
        "partitionId": "00000000-0000-0000-0000-000000000001",
        "status": "completed",
        "consumerGroup": "__QUEUE_MODE__",
        "leaseId": "",
        "error": "",
    }
    with pytest.raises(InvalidRequest, match="partitionId must be a UUID"):
        v.validate_ack({"transactionId": "t", "partitionId": "p"})
    with pytest.raises(InvalidRequest, match="status must be one of"):
        v.validate_ack(
            {"transactionId": "t", "partitionId": "00000000-0000-0000-0000-000000000001", "status": "done"}
        )
    batch = v.validate_ack_batch(
        {
            "acknowledgments": [
                {
                    "transactionId": "t",
                    "partitionId": "00000000-0000-0000-0000-000000000001",
                    "consumerGroup": "x",
                }
            ],
            "consumerGroup": "top",
        }
    )
    assert batch[0]["consumerGroup"] == "top"


PARTITION = "6F1E1B1C-0000-4000-8000-00000000000A"  # not canonical: PostgreSQL's form is lower case


def test_ack_batch_checks_a_shared_partition_id_once_and_still_names_the_bad_item() -> None:
    acks = [
        {"transactionId": f"t{i}", "partitionId": PARTITION, "leaseId": "", "consumerGroup": None}
        for i in range(3)
    ]
    batch = v.validate_ack_batch({"acknowledgments": acks})
    assert [a["partitionId"] for a in batch] == [PARTITION.lower()] * 3
    assert [(a["leaseId"], a["consumerGroup"]) for a in batch] == [("", "__QUEUE_MODE__")] * 3

    bad_id = [*acks[:2], {"transactionId": "t2", "partitionId": PARTITION[:-1] + "G"}]
    with pytest.raises(InvalidRequest, match=r"^acknowledgments\[2\]\.partitionId must be a UUID"):
        v.validate_ack_batch({"acknowledgments": bad_id})
    for field, value, message in [
        ("transactionId", "", "must not be empty"),
        ("transactionId", "t" * 256, "is longer than 255 characters"),
        ("leaseId", "l\x00", "must not contain NUL characters"),
        ("consumerGroup", "g" * 256, "is longer than 255 characters"),
    ]:
        with pytest.raises(InvalidRequest, match=rf"^acknowledgments\[1\]\.{field} {message}"):
            v.validate_ack_batch({"acknowledgments": [acks[0], {**acks[1], field: value}]})


def test_configure_option_types() -> None:
    clean = v.validate_configure(
        {"queue": "q", "options": {"leaseTime": 10, "encryptionEnabled": True, "unknown": 1}}
    )
    assert clean["options"] == {"leaseTime": 10, "encryptionEnabled": True}
    with pytest.raises(InvalidRequest, match="options.leaseTime must be an integer"):
        v.validate_configure({"queue": "q", "options": {"leaseTime": "10"}})
    with pytest.raises(InvalidRequest, match="options.retryLimit must be an integer"):
        v.validate_configure({"queue": "q", "options": {"retryLimit": True}})
    with pytest.raises(InvalidRequest, match="queue is required"):
        v.validate_configure({"options": {}})


def test_pop_params() -> None:
    params = v.validate_pop_params(
        {"batch": "5", "wait": "1", "subscriptionMode": "new-only"},
        default_batch=1,
        default_timeout_ms=30000,
        default_subscription_mode="",
    )
    assert params["batch"] == 5 and params["wait"] is True and params["subscriptionMode"] == "new"
    with pytest.raises(InvalidRequest, match="batch must be an integer"):
        v.validate_pop_params(
            {"batch": "abc"}, default_batch=1, default_timeout_ms=1, default_subscription_mode=""
        )
