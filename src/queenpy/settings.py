"""Settings of one broker process, read from the environment once, with Queen's variable names.

Explicit arguments win over the environment (``Settings.from_env(port=7000)``). Booleans follow Queen:
only the exact string ``true`` is true. Durations carry their unit in the field name.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from queenpy.errors import ConfigurationError
from queenpy.store.hosts import url_hosts

__all__ = ["FusionSettings", "JwtSettings", "ServiceSettings", "Settings"]


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return default


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env[name])
    except (KeyError, ValueError):
        return default


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    return default if value is None else value == "true"


@dataclass(frozen=True)
class FusionSettings:
    """Request fusion of one operation type (Queen's ``QUEEN_<TYPE>_*`` variables).

    ``max_batch_size``: most requests (items) fused into one procedure call; ``max_concurrent``: most calls
    of this type in flight per worker process (the adaptive limit's ceiling in ``vegas`` mode);
    ``max_hold_ms``: extra wait before firing a partial batch (0: fire as soon as a slot is free);
    ``max_batch_bytes``: most request bytes fused into one call (0: no cap; transactions only).
    For transactions an "item" is an operation: an ack, or one pushed message.
    """

    max_batch_size: int
    max_concurrent: int
    max_hold_ms: int = 0
    max_batch_bytes: int = 0

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], op: str, batch: int, concurrent: int, batch_bytes: int = 0
    ) -> FusionSettings:
        prefix = f"QUEEN_{op.upper()}_"
        return cls(
            max_batch_size=max(1, _int(env, prefix + "MAX_BATCH_SIZE", batch)),
            max_concurrent=max(1, _int(env, prefix + "MAX_CONCURRENT", concurrent)),
            max_hold_ms=max(0, _int(env, prefix + "MAX_HOLD_MS", 0)),
            # only operation types with a byte cap (transactions) read theirs
            max_batch_bytes=max(0, _int(env, prefix + "MAX_BATCH_BYTES", batch_bytes)) if batch_bytes else 0,
        )


@dataclass(frozen=True)
class JwtSettings:
    """JWT configuration, from Queen's ``JWT_*`` variables."""

    enabled: bool = False
    algorithm: str = "HS256"
    secret: str | None = None
    public_key: str | None = None
    jwks_url: str | None = None
    issuer: str | None = None
    audience: str | None = None
    clock_skew_s: int = 30
    skip_paths: tuple[str, ...] = ("/health", "/metrics/prometheus", "/metrics", "/")
    roles_claim: str = "role"
    roles_array_claim: str = "roles"
    role_admin: str = "admin"
    role_read_write: str = "read-write"
    role_read_only: str = "read-only"
    jwks_timeout_ms: int = 5000

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JwtSettings:
        def opt(name: str) -> str | None:
            return env.get(name) or None

        skip = env.get("JWT_SKIP_PATHS")
        try:
            skew = int(env.get("JWT_CLOCK_SKEW", "30"))
        except ValueError:
            skew = 30
        return cls(
            enabled=env.get("JWT_ENABLED") == "true",
            algorithm=env.get("JWT_ALGORITHM", "HS256"),
            secret=opt("JWT_SECRET"),
            public_key=opt("JWT_PUBLIC_KEY"),
            jwks_url=opt("JWT_JWKS_URL"),
            issuer=opt("JWT_ISSUER"),
            audience=opt("JWT_AUDIENCE"),
            clock_skew_s=skew,
            skip_paths=tuple(p.strip() for p in skip.split(",") if p.strip())
            if skip is not None
            else cls.skip_paths,
            roles_claim=env.get("JWT_ROLES_CLAIM", "role"),
            roles_array_claim=env.get("JWT_ROLES_ARRAY_CLAIM", "roles"),
            role_admin=env.get("JWT_ROLE_ADMIN", "admin"),
            role_read_write=env.get("JWT_ROLE_READ_WRITE", "read-write"),
            role_read_only=env.get("JWT_ROLE_READ_ONLY", "read-only"),
        )


@dataclass(frozen=True)
class ServiceSettings:
    """The background services (API.md section 16, Queen's variable names; units in the field names).

    An interval of 0 or less turns its job off; ``enabled`` (``QUEENPY_SERVICES``, queenpy's own) turns all of
    them off in this process. Retention and eviction delete at most ``*_batch_size`` messages per transaction.
    ``partition_cleanup_days``: empty partitions idle that long are deleted; ``metrics_retention_days``:
    metrics, retention history and the services' run log are kept that long; ``stats_history_retention_days``:
    the per-minute throughput. Day counts may be fractions (tests use seconds' worth).
    ``retention_vacuum_rows`` (``RETENTION_VACUUM_ROWS``, queenpy's own): once retention has deleted that many
    messages since its last vacuum, it runs ``VACUUM (SKIP_LOCKED) queen.messages`` itself, which bounds the
    dead space the table carries by rows instead of by delete rate x ``autovacuum_naptime``; 0 (the default)
    leaves vacuuming to autovacuum.
    ``stats_reconcile_chunk`` (``STATS_RECONCILE_CHUNK``, queenpy's own): the stats job's reconcile, started
    every ``stats_reconcile_interval_ms``, is a pass over the partitions that adds this many of them to each
    run (``queen.stats_refresh_v4``), so no reconcile run's cost grows with the partitions stored.
    ``stats_run_partitions`` (``STATS_RUN_PARTITIONS``, queenpy's own): the most changed partitions one step
    of a stats run takes (in id order; the run's next step goes on after the last, paced, until the sweep of
    what changed ends), so no step keeps a core busy for long: at a million partitions a step of 10,000
    took 5 to 10 s (benchmarks/journal/2026-11.md, issue 44).
    ``duty_cycle`` (``SERVICES_DUTY_CYCLE``, queenpy's own, 0 < d <= 1): the share of its wall time a job's
    database steps may take; after a step of t seconds it rests t x (1 - d) / d
    (``queenpy.services.jobs.Pace``). 1 runs the jobs flat out. For the jobs that delete (retention,
    eviction) it is the floor: a run's duty rises to twice what the last run's deletions needed when that is
    more, so that they keep up with the messages that expire (``queenpy.services.jobs.keep_up_duty``).
    """

    enabled: bool = True
    retention_interval_ms: int = 300_000
    retention_batch_size: int = 1000
    eviction_interval_ms: int = 60_000
    eviction_batch_size: int = 1000
    partition_cleanup_days: float = 30.0
    metrics_retention_days: float = 90.0
    stats_interval_ms: int = 10_000
    stats_reconcile_interval_ms: int = 120_000
    stats_reconcile_chunk: int = 1_000
    stats_run_partitions: int = 1_000
    stats_history_retention_days: float = 7.0
    retention_vacuum_rows: int = 0
    duty_cycle: float = 0.25

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ServiceSettings:
        return cls(
            enabled=_bool(env, "QUEENPY_SERVICES", True),
            retention_interval_ms=_int(env, "RETENTION_INTERVAL", 300_000),
            retention_batch_size=max(1, _int(env, "RETENTION_BATCH_SIZE", 1000)),
            eviction_interval_ms=_int(env, "EVICTION_INTERVAL", 60_000),
            eviction_batch_size=max(1, _int(env, "EVICTION_BATCH_SIZE", 1000)),
            partition_cleanup_days=_float(env, "PARTITION_CLEANUP_DAYS", 30.0),
            metrics_retention_days=_float(env, "METRICS_RETENTION_DAYS", 90.0),
            stats_interval_ms=_int(env, "STATS_INTERVAL_MS", 10_000),
            stats_reconcile_interval_ms=_int(env, "STATS_RECONCILE_INTERVAL_MS", 120_000),
            stats_reconcile_chunk=max(1, _int(env, "STATS_RECONCILE_CHUNK", 1_000)),
            stats_run_partitions=max(1, _int(env, "STATS_RUN_PARTITIONS", 1_000)),
            stats_history_retention_days=_float(env, "STATS_HISTORY_RETENTION_DAYS", 7.0),
            retention_vacuum_rows=_int(env, "RETENTION_VACUUM_ROWS", 0),
            duty_cycle=min(1.0, max(0.01, _float(env, "SERVICES_DUTY_CYCLE", 0.25))),
        )


# (max items per call, max calls in flight per worker process). Push: one call in flight per worker. Every
# push call locks the partitions it writes until COMMIT, so concurrent calls mostly wait for each other;
# one call per worker lets everything that arrives meanwhile fuse into the next call: with 1 message per
# request, 50 connections and 2 workers it answered about twice the requests a second of 8 calls in flight
# (benchmarks/RESULTS.md).
# Pop and transaction: one call in flight per worker too, for the same reason: what arrives while a call runs
# fuses into the next, set-based, call (queen.pop_group_v1, queen.transaction_v3), which cost PostgreSQL about
# half as much CPU per one-message hand-off as four calls of small groups, at the same or a higher rate
# (benchmarks/journal/2026-11.md, issue 40).
_FUSION_DEFAULTS = {
    "push": (500, 1),
    "pop": (100, 1),
    "ack": (500, 4),
    # client transactions: group commit (queen.transaction_v3); the batch counts operations (acks and pushed
    # messages), as many as a fused ack or push call takes, and bytes (below): docs/architecture.md,
    # "Fusion and transactions"
    "transaction": (1000, 1),
    "renew_lease": (100, 2),
    # Queen Streams cycles: never fused (one PostgreSQL transaction each)
    "streams_cycle": (1, 8),
}
# most request bytes in one fused call, per operation type (QUEEN_<OP>_MAX_BATCH_BYTES; 0: no cap). A group of
# transactions is one JSONB value that PostgreSQL parses whole and holds in memory while it runs: 4 MiB keeps
# it near push's largest batches (500 items of 1-8 KB) while one request of up to HTTP_MAX_BODY_BYTES still
# goes alone.
_FUSION_BATCH_BYTES = {"transaction": 4 * 1024 * 1024}


@dataclass(frozen=True)
class Settings:
    """Everything a broker process needs to know; see API.md section 21 for the variables."""

    host: str = "0.0.0.0"
    port: int = 6632
    num_workers: int = 2
    database_url: str | None = None
    pool_size: int = 10
    statement_timeout_ms: int = 30000
    default_timeout_ms: int = 30000
    default_batch_size: int = 1
    default_subscription_mode: str = ""
    pop_wait_initial_interval_ms: int = 100
    pop_wait_backoff_threshold: int = 3
    pop_wait_backoff_multiplier: float = 2.0
    pop_wait_max_interval_ms: int = 1000
    # queenpy's own: how often a process re-announces its parked pops, and how long a process that starts
    # listening notifies every push while the others answer its probe (engine.WAITING_CHANNEL)
    pop_wait_announce_interval_ms: int = 5000
    pop_wait_listen_grace_ms: int = 2000
    concurrency_mode: str = "vegas"
    vegas_min_limit: int = 1
    vegas_alpha: int = 3
    vegas_beta: int = 12
    encryption_key: str | None = None
    jwt: JwtSettings = field(default_factory=JwtSettings)
    log_level: str = "info"
    access_log: bool = False  # one log line per request (QUEEN_ACCESS_LOG=true, or LOG_LEVEL debug/trace)
    data_dir: str | None = None
    file_buffer_dir: str | None = None
    file_buffer_flush_ms: int = 100
    file_buffer_max_batch: int = 100
    file_buffer_events_per_file: int = 10_000
    # every worker samples its own numbers (CPU, memory, pool, fusion, long polls) this often, and writes the
    # current minute's aggregates to queen.system_metrics / worker_metrics / queue_lag_metrics this often
    metrics_sample_interval_ms: int = 1000
    metrics_aggregate_interval_s: float = 60.0
    fusion: dict[str, FusionSettings] = field(default_factory=dict)
    # HTTP limits of each worker process (queenpy's own; docs/reliability.md, "Limits")
    http_max_body_bytes: int = 10 * 1024 * 1024
    http_max_header_bytes: int = 64 * 1024
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 30_000
    http_keep_alive_timeout_s: int = 75
    http_max_connections: int = 10_000
    # the HTTP server under each worker's app (queenpy's own): uvicorn with httptools, or granian (Rust);
    # uvicorn cost less CPU per request (benchmarks/RESULTS.md, "HTTP server")
    http_server: str = "uvicorn"
    push_max_items: int = 10_000
    services: ServiceSettings = field(default_factory=ServiceSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read the settings from ``env`` (default ``os.environ``); keyword arguments override."""
        env = os.environ if env is None else env
        database_url = env.get("DATABASE_URL") or _database_url_from_parts(env)
        if database_url:
            try:
                url_hosts(database_url)  # libpq's multi-host form too; a bad host fails here, not at connect
            except ValueError as exc:
                raise ConfigurationError(f"DATABASE_URL (or PG_HOST/PG_PORT): {exc}") from exc
        cores = os.cpu_count() or 1
        values: dict[str, Any] = dict(  # noqa: C408 - keyword form, one line per setting
            host=env.get("HOST", "0.0.0.0"),
            port=_int(env, "PORT", 6632),
            num_workers=max(1, _int(env, "NUM_WORKERS", cores)),
            database_url=database_url,
            pool_size=max(2, _int(env, "DB_POOL_SIZE", 10)),
            statement_timeout_ms=_int(env, "DB_STATEMENT_TIMEOUT", 30000),
            default_timeout_ms=_int(env, "DEFAULT_TIMEOUT", 30000),
            default_batch_size=max(1, _int(env, "DEFAULT_BATCH_SIZE", 1)),
            default_subscription_mode=env.get("DEFAULT_SUBSCRIPTION_MODE", ""),
            pop_wait_initial_interval_ms=_int(env, "POP_WAIT_INITIAL_INTERVAL_MS", 100),
            pop_wait_backoff_threshold=_int(env, "POP_WAIT_BACKOFF_THRESHOLD", 3),
            pop_wait_backoff_multiplier=_float(env, "POP_WAIT_BACKOFF_MULTIPLIER", 2.0),
            pop_wait_max_interval_ms=_int(env, "POP_WAIT_MAX_INTERVAL_MS", 1000),
            pop_wait_announce_interval_ms=max(1, _int(env, "POP_WAIT_ANNOUNCE_INTERVAL_MS", 5000)),
            pop_wait_listen_grace_ms=max(0, _int(env, "POP_WAIT_LISTEN_GRACE_MS", 2000)),
            concurrency_mode=env.get("QUEEN_CONCURRENCY_MODE", "vegas"),
            vegas_min_limit=max(1, _int(env, "QUEEN_VEGAS_MIN_LIMIT", 1)),
            vegas_alpha=_int(env, "QUEEN_VEGAS_ALPHA", 3),
            vegas_beta=_int(env, "QUEEN_VEGAS_BETA", 12),
            encryption_key=env.get("QUEEN_ENCRYPTION_KEY") or None,
            jwt=JwtSettings.from_env(env),
            log_level=env.get("LOG_LEVEL", "info"),
            access_log=_bool(env, "QUEEN_ACCESS_LOG", False) or env.get("LOG_LEVEL") in ("debug", "trace"),
            data_dir=env.get("QUEENPY_DATA_DIR") or None,
            file_buffer_dir=env.get("FILE_BUFFER_DIR") or None,
            file_buffer_flush_ms=max(10, _int(env, "FILE_BUFFER_FLUSH_MS", 100)),
            file_buffer_max_batch=max(1, _int(env, "FILE_BUFFER_MAX_BATCH", 100)),
            file_buffer_events_per_file=max(1, _int(env, "FILE_BUFFER_EVENTS_PER_FILE", 10_000)),
            metrics_sample_interval_ms=max(50, _int(env, "METRICS_SAMPLE_INTERVAL_MS", 1000)),
            metrics_aggregate_interval_s=max(0.1, _float(env, "METRICS_AGGREGATE_INTERVAL_S", 60.0)),
            fusion={
                op: FusionSettings.from_env(env, op, batch, concurrent, _FUSION_BATCH_BYTES.get(op, 0))
                for op, (batch, concurrent) in _FUSION_DEFAULTS.items()
            },
            http_max_body_bytes=max(1024, _int(env, "HTTP_MAX_BODY_BYTES", 10 * 1024 * 1024)),
            http_max_header_bytes=max(1024, _int(env, "HTTP_MAX_HEADER_BYTES", 64 * 1024)),
            http_header_timeout_ms=max(100, _int(env, "HTTP_HEADER_TIMEOUT_MS", 10_000)),
            http_body_timeout_ms=max(100, _int(env, "HTTP_BODY_TIMEOUT_MS", 30_000)),
            http_keep_alive_timeout_s=max(1, _int(env, "HTTP_KEEP_ALIVE_TIMEOUT_S", 75)),
            http_max_connections=max(2, _int(env, "HTTP_MAX_CONNECTIONS", 10_000)),
            http_server=env.get("QUEENPY_HTTP_SERVER", "uvicorn"),
            push_max_items=max(1, _int(env, "PUSH_MAX_ITEMS", 10_000)),
            services=ServiceSettings.from_env(env),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def fusion_for(self, op: str) -> FusionSettings:
        """The fusion settings of one operation type."""
        if op in self.fusion:
            return self.fusion[op]
        batch, concurrent = _FUSION_DEFAULTS[op]
        return FusionSettings(batch, concurrent, max_batch_bytes=_FUSION_BATCH_BYTES.get(op, 0))


def _database_url_from_parts(env: Mapping[str, str]) -> str | None:
    """``PG_HOST``/``PG_PORT``/``PG_DB``/``PG_USER``/``PG_PASSWORD`` as a URL, if any of them is set."""
    if not any(name in env for name in ("PG_HOST", "PG_PORT", "PG_DB", "PG_USER", "PG_PASSWORD")):
        return None
    user = quote(env.get("PG_USER", "postgres"), safe="")
    password = quote(env.get("PG_PASSWORD", "postgres"), safe="")
    host = env.get("PG_HOST", "localhost")
    port = env.get("PG_PORT", "5432")
    database = env.get("PG_DB", "postgres")
    sslmode = "require" if env.get("PG_USE_SSL") == "true" else "disable"
    return f"postgresql://{user}:{password}@{host}:{port}/{database}?sslmode={sslmode}"
