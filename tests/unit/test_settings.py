"""Settings come from Queen's environment variable names; explicit arguments win."""

from __future__ import annotations

from queenpy.settings import Settings


def test_queen_variable_names_are_read() -> None:
    settings = Settings.from_env(
        {
            "PORT": "7000",
            "HOST": "127.0.0.1",
            "NUM_WORKERS": "3",
            "DEFAULT_BATCH_SIZE": "5",
            "POP_WAIT_INITIAL_INTERVAL_MS": "50",
            "QUEEN_PUSH_MAX_BATCH_SIZE": "77",
            "QUEEN_CONCURRENCY_MODE": "static",
            "JWT_ENABLED": "TRUE",
        }
    )
    assert (settings.port, settings.host, settings.num_workers) == (7000, "127.0.0.1", 3)
    assert settings.default_batch_size == 5
    assert settings.pop_wait_initial_interval_ms == 50
    assert settings.fusion_for("push").max_batch_size == 77
    assert settings.concurrency_mode == "static"
    assert settings.jwt.enabled is False  # only the exact string "true" is true, as in Queen


def test_database_url_from_pg_variables_and_overrides() -> None:
    settings = Settings.from_env(
        {"PG_HOST": "db", "PG_PORT": "6543", "PG_USER": "u", "PG_PASSWORD": "p w", "PG_DB": "queen"},
        port=9999,
    )
    assert settings.database_url == "postgresql://u:p%20w@db:6543/queen?sslmode=disable"
    assert settings.port == 9999
    assert Settings.from_env({}).database_url is None
    assert Settings.from_env({"DATABASE_URL": "postgresql://x/y"}).database_url == "postgresql://x/y"


def test_garbage_numbers_fall_back_to_defaults() -> None:
    settings = Settings.from_env({"PORT": "abc", "DEFAULT_TIMEOUT": ""})
    assert settings.port == 6632
    assert settings.default_timeout_ms == 30000


def test_service_settings_use_queen_names_and_fractions_of_days() -> None:
    services = Settings.from_env(
        {
            "RETENTION_INTERVAL": "250",
            "RETENTION_BATCH_SIZE": "7",
            "EVICTION_INTERVAL": "0",
            "PARTITION_CLEANUP_DAYS": "0.5",
            "METRICS_RETENTION_DAYS": "2",
            "STATS_INTERVAL_MS": "100",
            "QUEENPY_SERVICES": "false",
        }
    ).services
    assert (services.retention_interval_ms, services.retention_batch_size, services.eviction_interval_ms) == (
        250,
        7,
        0,
    )
    assert (services.partition_cleanup_days, services.metrics_retention_days) == (0.5, 2.0)
    assert services.stats_interval_ms == 100 and services.enabled is False
    defaults = Settings.from_env({}).services
    assert (defaults.retention_interval_ms, defaults.eviction_interval_ms, defaults.stats_interval_ms) == (
        300_000,
        60_000,
        10_000,
    )
    assert defaults.enabled is True
