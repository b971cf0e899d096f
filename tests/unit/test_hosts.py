"""Host names are checked before a resolver sees them; multi-host DATABASE_URLs are split into checked
pairs."""

from __future__ import annotations

import pytest

from queenpy.errors import ConfigurationError
from queenpy.settings import Settings
from queenpy.store.hosts import check_host, url_hosts


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "db.example.com",
        "queen_db",
        "10.0.0.7",
        "::1",
        "[::1]",
        "/var/run/postgresql",
        "bücher.de",
        "primary.svc.cluster.local.",
    ],
)
def test_good_hosts_pass(host: str) -> None:
    assert check_host(host) == host


@pytest.mark.parametrize("host", ["\u0094", "", "a b", "a..b", "-x.com", "x" * 64, "db\x00"])
def test_bad_hosts_raise_value_error_not_unicode_error(host: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_host(host)
    assert not isinstance(raised.value, UnicodeError)


def test_multi_host_urls_are_split_in_order() -> None:
    assert url_hosts(
        "postgresql://u@127.0.0.1:5433,127.0.0.1:5434/queen?target_session_attrs=read-write"
    ) == [("127.0.0.1", 5433), ("127.0.0.1", 5434)]
    assert url_hosts("postgresql://u:p@db1,[::1]:6000/q") == [("db1", None), ("::1", 6000)]
    assert url_hosts("postgresql://postgres:@/postgres?host=/tmp/sock") == [("/tmp/sock", None)]
    assert url_hosts("postgresql:///queen") == []
    with pytest.raises(ValueError, match="port"):
        url_hosts("postgresql://u@db:99999/q")


def test_a_bad_host_in_database_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="DATABASE_URL"):
        Settings.from_env({"DATABASE_URL": "postgresql://u@good,bad%C2%94host:5432/q"})
    with pytest.raises(ConfigurationError, match="DATABASE_URL"):
        Settings.from_env({"PG_HOST": "a b"})
    assert Settings.from_env({"DATABASE_URL": "postgresql://u@h1:1,h2:2/q"}).database_url is not None
