"""PostgreSQL host names and multi-host URLs, checked before any connection uses them.

A host given to asyncpg (or libpq) is resolved by ``socket.getaddrinfo``, which encodes a ``str`` with
Python's ``idna`` codec: a name that codec cannot encode (``"\\u0094"``) raises ``UnicodeError`` deep in a
connection attempt, far from the field that carried it. Every host is therefore checked here first:

- a Unix socket directory: an absolute path (libpq's rule: a host that starts with ``/``);
- an IP address (IPv4, or IPv6 with or without brackets);
- a DNS name: ASCII labels of letters, digits, ``-`` and ``_`` (container and service names use ``_``), 1-63
  characters each, 253 in all; a name with other characters must be a valid internationalised name
  (IDNA 2008 with the UTS 46 mapping, the ``idna`` package, and encodable by Python's own codec).

:func:`url_hosts` splits a libpq URL's host list, ``postgresql://u@h1:5432,h2:5433/db?target_session_attrs=
read-write`` (and the ``?host=`` query form), into ``(host, port)`` pairs, each checked.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import parse_qs, unquote, urlsplit

import idna

__all__ = ["check_host", "url_hosts"]

_ASCII_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z")


def check_host(host: str) -> str:
    """``host`` itself when it is a Unix socket directory, an IP address or a DNS name (module docstring).

    Raises:
        ValueError: with a message that says what is wrong with it (the caller names the field).
    """
    if not isinstance(host, str) or not host:
        raise ValueError("a host name must be a non-empty string")
    if host.startswith("/"):
        if "\x00" in host or not host.isprintable():
            raise ValueError("a Unix socket directory must be a printable path")
        return host
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
        return host
    except ValueError:
        pass
    name = host.removesuffix(".")  # a fully qualified name may end with a dot
    if len(name) > 253:
        raise ValueError("a host name has at most 253 characters")
    if name.isascii():
        bad = next((label for label in name.split(".") if not _ASCII_LABEL.match(label)), None)
        if bad is not None:
            raise ValueError(
                f"a host name is made of labels of 1-63 letters, digits, '-' or '_', not {bad!r}"
            )
        return host
    try:
        idna.encode(name, uts46=True)
        name.encode("idna")  # what socket.getaddrinfo will do with it (IDNA 2003): must not raise either
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(f"{host!r} is not a valid host name ({exc})") from exc
    return host


def url_hosts(url: str) -> list[tuple[str, int | None]]:
    """The ``(host, port)`` pairs of a ``postgresql://`` URL, in order: the netloc's comma-separated list
    (``h1:5432,h2,[::1]:5433``) or the ``host``/``port`` query parameters; ``[]`` when it names none (libpq's
    default socket). Ports: None when not given.

    Raises:
        ValueError: a host that :func:`check_host` refuses, or a port that is not 1-65535.
    """
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    pairs: list[tuple[str, str | None]] = []
    for item in filter(None, netloc.split(",")):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            pairs.append((host, rest[1:] if rest.startswith(":") else None))
        else:
            host, colon, port = item.partition(":")
            pairs.append((unquote(host), port if colon else None))
    query = parse_qs(parts.query)
    if "host" in query:
        hosts = query["host"][0].split(",")
        ports = query.get("port", [""])[0].split(",")
        pairs = [
            (
                host,
                ports[i]
                if i < len(ports) and ports[i]
                else (ports[0] if len(ports) == 1 and ports[0] else None),
            )
            for i, host in enumerate(hosts)
        ]
    result: list[tuple[str, int | None]] = []
    for name, port_text in pairs:
        if not name:
            continue
        check_host(name)
        if not port_text:
            result.append((name, None))
            continue
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"port {port_text!r} of host {name!r} is not a TCP port number (1-65535)")
        result.append((name, int(port_text)))
    return result
