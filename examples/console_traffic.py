"""Traffic for a look at the console: producers on six queues, three consumer groups that ack (3 % of
messages dead-lettered with "card declined"), and a trace named ``checkout`` on every tenth message.

    python examples/console_traffic.py --url http://localhost:6632 --seconds 240

Then open http://localhost:6632/ (the screenshots in docs/operations.md were taken this way, see
tests/browser/test_screenshots.py).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import httpx

QUEUES = ["orders", "payments", "emails", "audit", "invoices", "shipments"]
CONSUMERS = [("orders", "billing"), ("payments", "ledger"), ("emails", "mailer")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:6632")
    parser.add_argument("--seconds", type=float, default=240)
    args = parser.parse_args()
    pushed = 0
    end = time.monotonic() + args.seconds
    with httpx.Client(base_url=args.url, timeout=30) as client:
        while time.monotonic() < end:
            for queue in QUEUES:
                count = random.randint(5, 40) if queue in ("orders", "payments") else random.randint(1, 8)
                items = [
                    {
                        "queue": queue,
                        "partition": f"p{random.randint(0, 3)}",
                        "payload": {"id": pushed + i, "amount": random.randint(1, 500)},
                    }
                    for i in range(count)
                ]
                client.post("/api/v1/push", json={"items": items}).raise_for_status()
                pushed += count
            for queue, group in CONSUMERS:
                answer = client.get(
                    f"/api/v1/pop/queue/{queue}",
                    params={"batch": 20, "wait": "false", "consumerGroup": group},
                )
                messages: list[dict[str, Any]] = answer.json().get("messages", []) if answer.content else []
                for message in messages:
                    failed = random.random() < 0.03
                    client.post(
                        "/api/v1/ack",
                        json={
                            "transactionId": message["transactionId"],
                            "partitionId": message["partitionId"],
                            "consumerGroup": group,
                            "status": "dlq" if failed else "completed",
                            "error": "card declined" if failed else None,
                        },
                    ).raise_for_status()
                    if random.random() < 0.1:
                        client.post(
                            "/api/v1/traces",
                            json={
                                "transactionId": message["transactionId"],
                                "partitionId": message["partitionId"],
                                "consumerGroup": group,
                                "eventType": "step",
                                "data": {"stage": "charged"},
                                "traceNames": ["checkout"],
                            },
                        ).raise_for_status()
            time.sleep(0.5)
    print(f"pushed {pushed} messages")


if __name__ == "__main__":
    main()
