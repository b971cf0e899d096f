"""The client commands of the ``queenpy`` CLI, run as subprocesses against the real broker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

import httpx

from queenpy.client import Queen

from helpers import closed_port_url, unique
from helpers import run_queenpy as queenpy


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_push_arguments_then_pop_prints_json_lines_in_order_and_acks(broker: Any) -> None:
    queue = unique("cli-push")
    pushed = queenpy(
        broker,
        "push",
        "--queue",
        queue,
        "--partition",
        "p",
        '{"n": 1}',
        "plain text",
        '{"data": {"n": 3}, "transactionId": "tx-3"}',
    )
    assert "pushed 3 message(s)" in pushed.stdout and "3 queued" in pushed.stdout
    popped = json_lines(queenpy(broker, "pop", "--queue", queue, "--batch", "10").stdout)
    assert [m["data"] for m in popped] == [{"n": 1}, "plain text", {"n": 3}]
    assert popped[2]["transactionId"] == "tx-3" and {m["partition"] for m in popped} == {"p"}
    assert queenpy(broker, "pop", "--queue", queue).stdout == ""  # acked: nothing left


def test_push_json_lines_from_stdin_in_batches(broker: Any) -> None:
    queue = unique("cli-stdin")
    lines = "\n".join(json.dumps({"n": n}) for n in range(250)) + "\n"
    pushed = queenpy(broker, "push", "-q", queue, "--batch-size", "100", "--json", stdin=lines)
    results = json_lines(pushed.stdout)
    assert len(results) == 250 and {r["status"] for r in results} == {"queued"}
    consumed = queenpy(
        broker, "consume", "-q", queue, "--batch", "50", "--limit", "250", "--idle-millis", "5000"
    )
    assert [m["data"]["n"] for m in json_lines(consumed.stdout)] == list(range(250))
    assert "consumed 250 message(s)" in consumed.stderr


def test_push_from_a_file_and_consume_with_a_group_and_limit(broker: Any, tmp_path: Any) -> None:
    queue = unique("cli-file")
    path = tmp_path / "messages.jsonl"
    path.write_text(
        "".join(json.dumps({"data": {"n": n}, "transactionId": f"f{n}"}) + "\n" for n in range(5))
    )
    queenpy(broker, "push", "-q", queue, "--file", str(path))
    consumed = json_lines(queenpy(broker, "consume", "-q", queue, "--group", "g1", "--limit", "3").stdout)
    assert [(m["data"]["n"], m["consumerGroup"]) for m in consumed] == [(0, "g1"), (1, "g1"), (2, "g1")]
    rest = json_lines(queenpy(broker, "consume", "-q", queue, "-g", "g1", "--idle-millis", "1500").stdout)
    assert [m["transactionId"] for m in rest] == ["f3", "f4"]


def test_ctrl_c_stops_consume_gracefully(broker: Any) -> None:
    queue = unique("cli-sigint")
    queenpy(broker, "push", "-q", queue, '{"n": 1}')
    environment = {key: value for key, value in os.environ.items() if not key.startswith("QUEEN_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "queenpy", "consume", "-q", queue, "--url", broker.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline())["data"] == {"n": 1}
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert out == "" and "consumed 1 message(s)" in err and "Traceback" not in err
    assert queenpy(broker, "pop", "-q", queue).stdout == ""  # it was acked before exiting


def test_options_come_from_environment_variables(broker: Any) -> None:
    queue = unique("cli-env")
    queenpy(broker, "push", "one", env={"QUEEN_QUEUE": queue, "QUEEN_PARTITION": "envp"})
    [message] = json_lines(queenpy(broker, "pop", env={"QUEEN_QUEUE": queue}).stdout)
    assert (message["data"], message["partition"]) == ("one", "envp")
    help_text = queenpy(None, "pop", "--help").stdout
    for variable in ("QUEEN_URL", "QUEEN_TOKEN", "QUEEN_QUEUE", "QUEEN_GROUP", "QUEEN_BATCH", "QUEEN_ACK"):
        assert variable in help_text


def test_configure_then_queues_list_and_describe(broker: Any) -> None:
    queue = unique("cli-queues")
    configured = json.loads(
        queenpy(
            broker,
            "configure",
            "-q",
            queue,
            "--lease-time-s",
            "12",
            "--retry-limit",
            "4",
            "--dead-letter-queue",
            "--json",
        ).stdout
    )
    assert configured["configured"] is True
    assert (configured["options"]["leaseTime"], configured["options"]["retryLimit"]) == (12, 4)
    queenpy(broker, "push", "-q", queue, "-p", "p1", "1", "2")
    queenpy(broker, "consume", "-q", queue, "-g", "readers", "--limit", "1")
    listed = json.loads(queenpy(broker, "queues", "--json").stdout)
    assert any(row["name"] == queue for row in listed)
    assert queue in queenpy(broker, "queues").stdout  # the table
    described = json.loads(queenpy(broker, "queues", "describe", "-q", queue, "--json").stdout)
    assert "p1" in {p["name"] for p in described["queue"]["partitions"]}
    [readers] = described["groups"]["readers"]
    assert (readers["partition"], readers["offsetLag"]) == ("p1", 1)
    table = queenpy(broker, "queues", "describe", "-q", queue).stdout
    assert "p1" in table and "readers" in table


def test_configure_retention_options_and_queues_shows_them_with_the_depth(broker: Any) -> None:
    queue = unique("cli-retention")
    configured = json.loads(
        queenpy(
            broker,
            "configure",
            "-q",
            queue,
            "--retention-s",
            "3600",
            "--completed-retention-s",
            "60",
            "--max-wait-time-s",
            "90",
            "--max-size",
            "5",
            "--json",
        ).stdout
    )["options"]
    assert (
        configured["retentionSeconds"],
        configured["completedRetentionSeconds"],
        configured["maxWaitTimeSeconds"],
        configured["maxSize"],
        configured["retentionEnabled"],
    ) == (3600, 60, 90, 5, True)
    queenpy(broker, "push", "-q", queue, "1", "2")
    httpx.post(f"{broker.url}/api/v1/stats/refresh", timeout=60)  # counts come from the stats job
    [row] = [r for r in json.loads(queenpy(broker, "queues", "--json").stdout) if r["name"] == queue]
    assert row["messages"]["total"] == 2 and row["options"]["maxWaitTimeSeconds"] == 90
    line = next(line for line in queenpy(broker, "queues").stdout.splitlines() if queue in line)
    assert [cell.strip() for cell in line.strip("│ ").split("│")][4:] == [
        "2",
        "2",
        "0",
        "1 h",
        "1 min",
        "90 s",
        "5",
    ]
    off = json.loads(
        queenpy(
            broker, "configure", "-q", queue, "--retention-s", "3600", "--no-retention-enabled", "--json"
        ).stdout
    )["options"]
    assert (off["retentionSeconds"], off["retentionEnabled"]) == (3600, False)


def test_groups_list_lag_and_seek(broker: Any) -> None:
    queue, group = unique("cli-groups"), unique("g")
    queenpy(broker, "push", "-q", queue, "1", "2", "3")
    queenpy(broker, "consume", "-q", queue, "-g", group, "--limit", "1")
    rows = json.loads(queenpy(broker, "groups", "--json").stdout)
    assert any(row["name"] == group and row["queueName"] == queue for row in rows)
    assert group in queenpy(broker, "groups", "list").stdout
    detail = json.loads(queenpy(broker, "groups", "describe", group, "--json").stdout)
    assert detail[queue]["partitions"][0]["offsetLag"] == 2
    lagging = json.loads(queenpy(broker, "groups", "lag", "--json").stdout)
    assert any(row["consumer_group"] == group for row in lagging)
    seek = queenpy(broker, "groups", "seek", group, "-q", queue, "--to-end")
    assert "moved to the end" in seek.stdout
    assert queenpy(broker, "pop", "-q", queue, "-g", group).stdout == ""
    queenpy(broker, "groups", "delete", group)
    assert json.loads(queenpy(broker, "groups", "describe", group, "--json").stdout) == {}


def test_dlq_list_shows_dead_letters(broker: Any) -> None:
    queue = unique("cli-dlq")
    with Queen(broker.url) as q:
        q.queue(queue).config({"retryLimit": 0, "retryDelay": 0, "deadLetterQueue": True}).create()
        q.queue(queue).push([{"data": {"bad": True}, "transactionId": "dead-1"}])
        [message] = q.queue(queue).pop()
        assert q.ack(message, False, error="cannot parse").dlq
    listed = json.loads(queenpy(broker, "dlq", "--queue", queue, "--json").stdout)
    assert [(m["transactionId"], m["errorMessage"]) for m in listed["messages"]] == [
        ("dead-1", "cannot parse")
    ]
    table = queenpy(broker, "dlq", "list", "-q", queue).stdout
    assert "dead-1" in table and "cannot parse" in table
    # the group's options reach its subcommand: one convention, -q, wherever it is written
    inherited = json.loads(queenpy(broker, "dlq", "-q", queue, "--json", "list").stdout)
    assert [m["transactionId"] for m in inherited["messages"]] == ["dead-1"]
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", table)  # failed at, UTC, Z


def test_dlq_replay_puts_the_message_back(broker: Any) -> None:
    queue = unique("cli-replay")
    with Queen(broker.url) as q:
        q.queue(queue).config({"retryLimit": 0, "retryDelay": 0}).create()
        q.queue(queue).push([{"data": 1, "transactionId": "again"}])
        [message] = q.queue(queue).pop()
        assert q.ack(message, False).dlq
    assert "replayed 1" in queenpy(broker, "dlq", "replay", "-q", queue, "--all").stdout
    assert [m["transactionId"] for m in json_lines(queenpy(broker, "pop", "-q", queue).stdout)] == ["again"]


def test_errors_are_one_line_unless_verbose() -> None:
    url = closed_port_url()
    short = queenpy(None, "pop", "-q", "x", "--url", url, check=False)
    assert short.returncode == 1 and short.stdout == ""
    assert (
        short.stderr.strip().startswith(f"error: cannot reach broker {url}")
        and "Traceback" not in short.stderr
    )
    assert "DatabaseUnavailable" not in short.stderr  # a sentence, not an exception class
    assert len(short.stderr.strip().splitlines()) == 1
    verbose = queenpy(None, "pop", "-q", "x", "--url", url, "-v", check=False)
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr


def test_seek_without_a_target_says_what_to_give(broker: Any) -> None:
    done = queenpy(broker, "groups", "seek", unique("g"), "-q", unique("q"), check=False)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "error: give where to move the cursors: --to-end or --timestamp ISO-TIME (one of them)"
    )


def test_version_and_pop_json(broker: Any) -> None:
    assert re.fullmatch(r"queenpy \S+\n", queenpy(None, "--version").stdout)
    queue = unique("cli-popjson")
    assert json.loads(queenpy(broker, "pop", "-q", queue, "--json").stdout) == []
    queenpy(broker, "push", "-q", queue, '{"a": 1}')
    [message] = json.loads(queenpy(broker, "pop", "-q", queue, "--json").stdout)
    assert message["data"] == {"a": 1}


def test_bad_input_is_reported_with_its_line(broker: Any) -> None:
    done = queenpy(broker, "push", "-q", unique("bad"), stdin='{"ok": 1}\n{not json\n', check=False)
    assert done.returncode == 1 and "line 2 is not JSON" in done.stderr
