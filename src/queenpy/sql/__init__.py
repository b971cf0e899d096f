"""The SQL of queenpy: numbered migrations and procedure families, shipped as package files.

Python holds names, not query text: :func:`migrations` and :func:`procedures` return ``(name, sql)`` pairs
in the order they are applied.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["migrations", "procedures"]


def _files(folder: str) -> list[tuple[str, str]]:
    root = resources.files(__package__).joinpath(folder)
    names = sorted(entry.name for entry in root.iterdir() if entry.name.endswith(".sql"))
    return [(name, root.joinpath(name).read_text(encoding="utf-8")) for name in names]


def migrations() -> list[tuple[str, str]]:
    """Schema migrations, each applied once and recorded with its checksum, in file-name order."""
    return _files("migrations")


def procedures() -> list[tuple[str, str]]:
    """Procedure families (``CREATE OR REPLACE``), re-applied whenever their checksum changes."""
    return _files("procedures")
