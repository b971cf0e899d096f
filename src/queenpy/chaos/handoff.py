"""A transactional hand-off consumer, run as its own process by the ``consumer-killed`` scenario so that it
can be killed with SIGKILL in the middle of a batch.

``python -m queenpy.chaos.handoff URL SOURCE TARGET GROUP BATCH PAUSE_MS`` pops ``BATCH`` messages of
``SOURCE`` for ``GROUP`` (with a lease), then hands each one on in its own transaction: ack it (with the
lease id, so an expired lease refuses the transaction) and push ``{"source": <id>}`` to ``TARGET`` with no
transactionId (the server makes one: exactly-once rests on the transaction alone, not on dedupe). It
sleeps ``PAUSE_MS`` before each hand-off (the work a real consumer does). It prints one JSON line per event
on stdout: ``{"batch": [ids], "at": t}`` after a pop, ``{"handed": id, "i": i, "n": n}`` after a committed
transaction, ``{"refused": id, "error": text}`` when a transaction was refused (the rest of the batch is
left to the lease's expiry).
"""

from __future__ import annotations

import asyncio
import sys
import time

import orjson

from queenpy.chaos.load import pop_messages, transport
from queenpy.errors import QueenError


def _say(event: dict[str, object]) -> None:
    sys.stdout.buffer.write(orjson.dumps(event) + b"\n")
    sys.stdout.flush()


async def hand_off(url: str, source: str, target: str, group: str, batch: int, pause_ms: int) -> None:
    """Run until killed (see the module docstring)."""
    client = transport([url])
    while True:
        messages = await pop_messages(client, source, group, batch)
        if not messages:
            continue
        _say({"batch": [m["transactionId"] for m in messages], "at": time.monotonic()})
        for index, message in enumerate(messages):
            await asyncio.sleep(pause_ms / 1000)
            operations = [
                {
                    "type": "ack",
                    "transactionId": message["transactionId"],
                    "partitionId": message["partitionId"],
                    "leaseId": message["leaseId"],
                    "status": "completed",
                    "consumerGroup": group,
                },
                {
                    "type": "push",
                    "items": [
                        {
                            "queue": target,
                            "partition": message["partition"],
                            "payload": {"source": message["transactionId"]},
                        }
                    ],
                },
            ]
            try:
                answer = await client.request(
                    "POST", "/api/v1/transaction", body={"operations": operations}, idempotent=False
                )
            except QueenError as exc:
                _say({"refused": message["transactionId"], "error": exc.message[:200]})
                break
            if isinstance(answer, dict) and answer.get("success") is True:
                _say({"handed": message["transactionId"], "i": index, "n": len(messages)})
            else:
                error = answer.get("error") if isinstance(answer, dict) else answer
                _say({"refused": message["transactionId"], "error": str(error)[:200]})
                break


if __name__ == "__main__":
    url, source, target, group, batch, pause_ms = sys.argv[1:7]
    asyncio.run(hand_off(url, source, target, group, int(batch), int(pause_ms)))
