"""At-rest encryption per queue (API.md section 14): ciphertext in PostgreSQL, plaintext on the wire."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

import httpx
import orjson
import psycopg
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from conftest import BrokerProcess
from helpers import unique

KEY = "0123456789abcdef" * 4


def test_encrypted_queue_stores_ciphertext_and_serves_plaintext(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    broker = start_broker(db_url, workers=1, extra_env={"QUEEN_ENCRYPTION_KEY": KEY})
    secret, plain = unique("secret"), unique("plain")
    httpx.post(
        f"{broker.url}/api/v1/configure",
        json={"queue": secret, "options": {"encryptionEnabled": True, "retryLimit": 0, "retryDelay": 0}},
    ).raise_for_status()
    payload = {"card": "4111 1111 1111 1111", "amount": 12.5}
    httpx.post(
        f"{broker.url}/api/v1/push",
        json={"items": [{"queue": secret, "payload": payload}, {"queue": plain, "payload": payload}]},
    ).raise_for_status()

    with psycopg.connect(db_url) as conn:
        rows = dict(
            conn.execute(
                "SELECT q.name, m.payload FROM queen.messages m "
                "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id"
            ).fetchall()
        )
        flags = dict(
            conn.execute(
                "SELECT q.name, m.is_encrypted FROM queen.messages m "
                "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id"
            ).fetchall()
        )
    stored = rows[secret]
    assert set(stored) == {"encrypted", "iv", "authTag"} and flags[secret] is True
    assert rows[plain] == payload and flags[plain] is False
    # the stored shape is Queen's: AES-256-GCM, 16-byte IV of which the first 12 bytes are the nonce
    iv = base64.b64decode(stored["iv"])
    assert len(iv) == 16
    clear = AESGCM(bytes.fromhex(KEY)).decrypt(
        iv[:12], base64.b64decode(stored["encrypted"]) + base64.b64decode(stored["authTag"]), None
    )
    assert orjson.loads(clear) == payload

    popped = httpx.get(f"{broker.url}/api/v1/pop/queue/{secret}").json()["messages"][0]
    assert popped["data"] == payload
    ack = httpx.post(
        f"{broker.url}/api/v1/ack",
        json={
            "transactionId": popped["transactionId"],
            "partitionId": popped["partitionId"],
            "leaseId": popped["leaseId"],
            "status": "failed",
        },
    )
    assert ack.json()[0]["dlq"] is True
    dlq = httpx.get(f"{broker.url}/api/v1/dlq", params={"queue": secret}).json()
    assert [m["data"] for m in dlq["messages"]] == [payload]


def test_data_written_by_the_original_broker_is_readable(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    """A payload encrypted the way the C++ broker does (16-byte IV, OpenSSL's 12-byte GCM nonce)."""
    broker = start_broker(db_url, workers=1, extra_env={"QUEEN_ENCRYPTION_KEY": KEY})
    queue = unique("legacy")
    iv = os.urandom(16)
    sealed = AESGCM(bytes.fromhex(KEY)).encrypt(iv[:12], b'{"from":"cpp"}', None)
    stored = {
        "encrypted": base64.b64encode(sealed[:-16]).decode(),
        "iv": base64.b64encode(iv).decode(),
        "authTag": base64.b64encode(sealed[-16:]).decode(),
    }
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT queen.push_messages_v3(%s::jsonb)",
            (orjson.dumps([{"queue": queue, "payload": stored, "isEncrypted": True}]).decode(),),
        )
    popped = httpx.get(f"{broker.url}/api/v1/pop/queue/{queue}").json()["messages"]
    assert [m["data"] for m in popped] == [{"from": "cpp"}]


def test_spark_binary_reads_and_direct_pushes_encrypt_and_decrypt(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    """The Spark connector's byte paths (``/spark/read`` answering payload bytes, ``/spark/push`` sending
    them) decrypt and encrypt like the JSON ones."""
    broker = start_broker(db_url, workers=1, extra_env={"QUEEN_ENCRYPTION_KEY": KEY})
    source, target = unique("secret-src"), unique("secret-dst")
    for queue in (source, target):
        httpx.post(
            f"{broker.url}/api/v1/configure", json={"queue": queue, "options": {"encryptionEnabled": True}}
        ).raise_for_status()
    payloads = [{"card": "4111", "n": i} for i in range(3)]
    httpx.post(
        f"{broker.url}/api/v1/push",
        json={"items": [{"queue": source, "partition": "p", "payload": p} for p in payloads]},
    ).raise_for_status()
    pid = next(
        p["partitionId"]
        for p in httpx.get(f"{broker.url}/api/v1/spark/offsets", params={"queue": source}).json()[
            "partitions"
        ]
        if p["partition"] == "p"
    )
    raw = httpx.post(
        f"{broker.url}/api/v1/spark/read",
        json={"ranges": [{"partitionId": pid, "upto": 3}]},
        headers={"Accept": "application/octet-stream"},
    ).content
    size = int.from_bytes(raw[:4], "big")
    lengths = orjson.loads(raw[4 : 4 + size])["ranges"][0]["dataBytes"]
    blob, texts, position = raw[4 + size :], [], 0
    for length in lengths:
        texts.append(blob[position : position + length])
        position += length
    assert [orjson.loads(t) for t in texts] == payloads  # plaintext on the wire

    header = orjson.dumps(
        {
            "queryId": unique("q"),
            "batchId": 0,
            "task": 0,
            "token": "t",
            "queue": target,
            "partitions": ["p"],
            "partitionIndexes": [0, 0, 0],
            "transactionIds": ["a", "b", "c"],
            "dataBytes": lengths,
        }
    )
    pushed = httpx.post(
        f"{broker.url}/api/v1/spark/push",
        content=len(header).to_bytes(4, "big") + header + blob,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert pushed.status_code == 200 and pushed.json()["pushed"] == 3, pushed.text
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT m.payload, m.is_encrypted FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s ORDER BY m.seq",
            (target,),
        ).fetchall()
    assert [set(payload) for payload, _ in stored] == [{"encrypted", "iv", "authTag"}] * 3
    assert all(flag for _, flag in stored)
    popped = httpx.get(f"{broker.url}/api/v1/pop/queue/{target}", params={"batch": 3}).json()["messages"]
    assert [m["data"] for m in popped] == payloads
