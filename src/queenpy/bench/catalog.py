"""The catalogue: Queen's standard scenarios and the PostgreSQL limits they are compared with. A scenario's
``kind`` names the module of :mod:`queenpy.bench.kinds` that runs it; a new kind adds its :class:`Scenario`
rows here (and a :class:`Limit`, if none fits) next to its module."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LIMITS", "SCENARIOS", "Limit", "Options", "Scenario", "payload"]


def payload(size: int) -> str:
    """A JSON object of exactly ``size`` bytes (at least 33)."""
    head, tail = '{"kind":"bench","n":12345,"v":"', '"}'
    return head + "x" * max(0, size - len(head) - len(tail)) + tail


def _size_name(size: int) -> str:
    return f"{size // 1024}KB" if size % 1024 == 0 else f"{size}B"


@dataclass(frozen=True)
class Limit:
    """A PostgreSQL limit measured with pgbench on the same server: ``insert`` writes ``rows`` rows per
    INSERT into ``bench.messages`` (``LIKE queen.messages INCLUDING ALL``, ids from ``gen_random_uuid()``);
    ``select1`` is ``SELECT 1``. ``log_latency``: per-transaction latencies (p50/p99) from pgbench's log."""

    key: str
    kind: str
    rows: int = 1
    payload_bytes: int = 40
    clients: int = 50
    log_latency: bool = False
    description: str = ""


def _insert_limit(rows: int, size: int, clients: int = 50) -> Limit:
    suffix = "" if clients == 50 else f"-{clients}client"
    return Limit(
        f"insert-{rows}-{_size_name(size)}{suffix}",
        "insert",
        rows,
        size,
        clients,
        clients == 1,
        f"pgbench, {clients} client(s), INSERT of {rows} row(s) of {_size_name(size)} per statement",
    )


LIMITS: dict[str, Limit] = {
    limit.key: limit
    for limit in [
        _insert_limit(1, 40, clients=1),
        *(_insert_limit(rows, size) for size in (40, 1024) for rows in (1, 10, 100)),
        Limit("select1", "select1", description="pgbench, 50 clients, SELECT 1 (prepared)"),
        Limit(
            "cycle-100",
            "cycle",
            rows=100,
            clients=8,
            description="pgbench, 8 clients, what a stream cycle writes per transaction (advisory lock, "
            "state read, upsert and delete, one sink row, a cursor update), counted as the 100 messages a "
            "cycle covers",
        ),
    ]
}


@dataclass(frozen=True)
class Scenario:
    """One benchmark scenario. ``kind``: a key of :data:`queenpy.bench.kinds.KINDS` (``push``, ``consume``,
    ``keepup``, ``soak``, ``operators``, ``streams``, ``spark``); ``mode`` (consume): ``auto`` (autoAck pops),
    ``ack`` (pop + ``/ack/batch``), ``handoff`` (pop + ``/transaction`` ack and push to a second queue),
    (spark) the sink's ``commit`` option, ``sync`` or ``pipelined``, or ``read`` (a batch read); ``groups``:
    consumer groups reading everything (fan-out); ``batch``: pop batch, or for ``spark`` the
    ``maxMessagesPerTrigger``; ``limit``: key in LIMITS."""

    name: str
    kind: str
    limit: str
    description: str
    per_request: int = 1
    payload_bytes: int = 40
    partitions: int = 100
    connections: int = 50
    threads: int = 2
    mode: str = "auto"
    groups: int = 1
    batch: int = 100
    quick: bool = False
    initial_rate: float = 50_000.0  # msg/s guess that sizes the backlog until a run has measured it
    default: bool = True  # in the default selection (soak runs only when named: --only soak)

    def wrk_connections(self, options: Options) -> int:
        """The scenario's wrk connections: ``--connections`` (``options.connections``) for the catalogue's
        default of 50, else the scenario's own number."""
        return options.connections if self.connections == 50 else self.connections


def _push(per_request: int, size: int, partitions: int = 100, quick: bool = False) -> Scenario:
    name = f"push-{per_request}-{_size_name(size)}" + ("" if partitions == 100 else f"-p{partitions}")
    return Scenario(
        name,
        "push",
        f"insert-{per_request}-{_size_name(size)}",
        f"push {per_request} msg/request of {_size_name(size)}, 50 connections, "
        f"one random partition of {partitions} per request",
        per_request=per_request,
        payload_bytes=size,
        partitions=partitions,
        quick=quick,
    )


SCENARIOS: list[Scenario] = [
    Scenario(
        "latency-1conn",
        "push",
        "insert-1-40B-1client",
        "push 1 msg/request of 40B, 1 connection, no other load (latency)",
        connections=1,
        threads=1,
        quick=True,
    ),
    _push(1, 40, quick=True),
    _push(10, 40, quick=True),
    _push(100, 40, quick=True),
    _push(1, 1024),
    _push(10, 1024),
    _push(100, 1024, quick=True),
    _push(10, 40, partitions=1),
    _push(10, 40, partitions=10_000),
    Scenario(
        "consume-auto",
        "consume",
        "insert-100-40B",
        "wildcard long-poll pop, batch 100, autoAck, 10 connections, 100 partitions",
        connections=10,
        mode="auto",
        quick=True,
        initial_rate=100_000,
    ),
    Scenario(
        "consume-ack",
        "consume",
        "insert-100-40B",
        "wildcard long-poll pop, batch 100, then POST /ack/batch, 10 connections, 100 partitions",
        connections=10,
        mode="ack",
        quick=True,
        initial_rate=40_000,
    ),
    Scenario(
        "consume-auto-p10000",
        "consume",
        "insert-100-40B",
        "wildcard long-poll pop, batch 100, autoAck, 10 connections, 10,000 partitions",
        connections=10,
        mode="auto",
        partitions=10_000,
        initial_rate=60_000,
    ),
    Scenario(
        "fanout-5",
        "consume",
        "insert-100-40B",
        "5 consumer groups each read everything: pop batch 100 autoAck, 10 connections round-robin",
        connections=10,
        mode="auto",
        groups=5,
        quick=True,
        initial_rate=60_000,
    ),
    Scenario(
        "fanout-10",
        "consume",
        "insert-100-40B",
        "10 consumer groups each read everything: pop batch 100 autoAck, 10 connections round-robin",
        connections=10,
        mode="auto",
        groups=10,
        initial_rate=60_000,
    ),
    Scenario(
        "handoff-tx",
        "consume",
        "insert-100-40B",
        "pop batch 100 from A, one POST /transaction acks them and pushes them to B, 10 connections",
        connections=10,
        mode="handoff",
        quick=True,
        initial_rate=20_000,
    ),
    Scenario(
        "handoff-tx-1",
        "consume",
        "insert-1-40B",
        "the recipe's hand-off: pop 1 from A, one POST /transaction acks it and pushes it to B, "
        "50 connections (compare push-1-40B)",
        mode="handoff",
        batch=1,
        quick=True,
        initial_rate=5_000,
    ),
    # operators: ``groups`` = queues seeded, ``partitions`` = partitions seeded over them (kinds/operators.py)
    Scenario(
        "operators-10k",
        "operators",
        "insert-10-40B",
        "status routes and a Prometheus scrape at 10,000 queues / 100,000 partitions; push 10 msg/request "
        "without and with a scraper polling /metrics/prometheus every second",
        per_request=10,
        partitions=100_000,
        groups=10_000,
        initial_rate=10_000,
    ),
    Scenario(
        "keepup-ack",
        "keepup",
        "insert-10-40B",
        "producer paced at a share of push-10-40B (--keepup-share, default 55%; 100 connections) while "
        "10 connections pop 100 + /ack/batch",
        per_request=10,
        connections=10,
        mode="ack",
        initial_rate=10_000,
    ),
    Scenario(
        "streams-tumbling",
        "streams",
        "cycle-100",
        "Queen Streams, tumbling-window count per partition as the SDK runs it: pop 100, state/get, one "
        "cycle (window upsert + delete, 1 sink push, ack); 8 connections, 100 partitions",
        connections=8,
        threads=8,
        batch=100,
        quick=True,
        initial_rate=20_000,
    ),
    Scenario(
        "soak",
        "soak",
        "insert-10-40B",
        "producer paced at half of push-10-40B (--soak-share), at most 70% of what push and consume-ack "
        "together allow (1/(1/push + 1/consume)), 10 connections pop 100 + /ack/batch, "
        "completedRetentionSeconds 5, for --duration (default 10 min): table size, broker RSS and the "
        "services' cost on push/consume (only with --only soak)",
        per_request=10,
        connections=10,
        mode="ack",
        initial_rate=10_000,
        default=False,
    ),
    Scenario(
        "spark-handoff",
        "spark",
        "insert-100-1KB",
        "Spark local[*] availableNow copy of a 1 KB backlog over 100 partitions to a new queue through "
        'format("queen") both ways, micro-batches of 20,000; steady rate after the first micro-batch '
        "(needs the spark extra)",
        payload_bytes=1024,
        batch=20_000,
        mode="sync",
        initial_rate=4_000,
    ),
    Scenario(
        "spark-handoff-pipelined",
        "spark",
        "insert-100-1KB",
        "spark-handoff with the sink's pipelined commits (commit=pipelined: the broker moves a micro-batch "
        "into the queue while Spark runs the next one)",
        payload_bytes=1024,
        batch=20_000,
        mode="pipelined",
        initial_rate=4_000,
    ),
    Scenario(
        "spark-handoff-direct",
        "spark",
        "insert-100-1KB",
        "spark-handoff with the sink's direct commits (commit=direct: each task pushes its rows with derived "
        "transactionIds, the broker dedupes, the commit records the batch; no staging)",
        payload_bytes=1024,
        batch=20_000,
        mode="direct",
        initial_rate=4_000,
    ),
    Scenario(
        "spark-batch-read",
        "spark",
        "insert-100-1KB",
        'spark.read.format("queen") of the same 1 KB backlog into a DataFrame, counted (a batch read, '
        "earliest to latest; needs the spark extra)",
        payload_bytes=1024,
        mode="read",
        initial_rate=20_000,
    ),
    # scale: ``partitions`` = the big queue's partitions (QUEENPY_SCALE_PARTITIONS overrides it), 10 messages
    # of 200 B each and 10 consumer groups half-way; measured next to a queue of 100 (kinds/scale.py)
    Scenario(
        "scale-1m",
        "scale",
        "insert-10-1KB",
        "one queue of 1,000,000 partitions x 10 stored messages (bulk SQL, checked against pushes): push "
        "10 x 1 KB, wildcard pop + ack with 10 groups, cold partition pops, every operator route, retention "
        "and partition cleanup under push, bytes on disk; each next to a queue of 100 partitions (only with "
        "--only scale-1m)",
        per_request=10,
        payload_bytes=1024,
        partitions=1_000_000,
        groups=10,
        default=False,
    ),
]


@dataclass
class Options:
    """How long and how hard: seconds of the measured window and of the warm-up, client connections of the
    push scenarios, whether to CHECKPOINT before each scenario, the soak's duration and producer share, the
    Spark scenarios' master."""

    seconds: float = 10.0
    warmup: float = 3.0
    connections: int = 50
    checkpoint: bool = True
    long_poll_ms: int = 1000
    keepup_fraction: float = 0.55
    soak_duration_s: float = 600.0
    soak_share: float = 0.5
    soak_rate: float | None = None  # msg/s; None: soak_share of the push capacity
    soak_transaction_ids: bool = False  # the soak's producer sends a transactionId per message (push.lua)
    spark_master: str = "local[*]"
