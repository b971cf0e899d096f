"""docs/configuration.md agrees with ``src/queenpy/settings.py``, checked by running the code, not by reading
its text: the variables ``Settings.from_env`` reads are recorded by the mapping it reads them from, and a
default in the table is checked by setting the variable to it, which must change no setting."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from queenpy.errors import ConfigurationError
from queenpy.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# a table row whose first cell is one variable name in code font: | `NAME` | default | unit | meaning |
ROW = re.compile(r"^\|\s*`(?P<name>[A-Z][A-Z0-9_]*)`\s*\|(?P<rest>.*)\|\s*$")
LITERAL = re.compile(r"^`(?P<value>[^`]*)`$")
# settings.py builds a database URL from these when any one is set (and DATABASE_URL is not)
PG_URL_PARTS = ("PG_HOST", "PG_PORT", "PG_DB", "PG_USER", "PG_PASSWORD")


class RecordingEnv(Mapping[str, str]):
    """An environment that records every variable looked up in it (``[]``, ``get`` and ``in`` all go through
    ``__getitem__``). Iterating is refused: a prefix scan would read variables no table row could name."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError(
            "settings.py iterates the environment: read variables by name, so they can be listed"
        )

    def __len__(self) -> int:
        return len(self.values)


def documented() -> dict[str, str]:
    """Variable name -> its default cell, from every table row of the page."""
    rows: dict[str, str] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        cells = [cell.strip() for cell in match["rest"].split("|")]
        assert len(cells) == 3, f"want | variable | default | unit | meaning |, got: {line}"
        assert match["name"] not in rows, f"{match['name']} has two rows"
        rows[match["name"]] = cells[0]
    return rows


def literal_defaults(rows: Mapping[str, str]) -> dict[str, str]:
    """The defaults written as one value in code font (others, such as "one per CPU core", are prose)."""
    return {name: m["value"] for name, cell in rows.items() if (m := LITERAL.match(cell))}


def read_by_settings(environments: list[dict[str, str]]) -> set[str]:
    read: set[str] = set()
    for values in environments:
        env = RecordingEnv(values)
        Settings.from_env(env)
        read |= env.read
    return read


def base_for(name: str, defaults: Mapping[str, str]) -> dict[str, str]:
    """The environment a variable's default is compared in: a ``PG_*`` default applies only once one of the
    URL's parts is set, so another part is set to its own default."""
    if not name.startswith("PG_"):
        return {}
    other = next(part for part in PG_URL_PARTS if part != name)
    return {other: defaults[other]}


def test_the_table_names_exactly_the_variables_settings_reads() -> None:
    rows = documented()
    # empty, the PG_* path, and every variable present (so branches taken only when one is set are read too)
    read = read_by_settings([{}, {"PG_HOST": "localhost", "PG_USE_SSL": "true"}, literal_defaults(rows)])
    assert len(read) > 50, sorted(read)  # the recorder sees the reads at all
    assert sorted(read - rows.keys()) == [], "read by settings.py, missing from docs/configuration.md"
    assert sorted(rows.keys() - read) == [], "in docs/configuration.md, never read by settings.py"


def wrong_defaults(defaults: Mapping[str, str]) -> dict[str, str]:
    """The documented defaults that are not the ones settings.py uses."""
    wrong = {}
    for name, value in defaults.items():
        base = base_for(name, defaults)
        baseline = Settings.from_env(base)
        if Settings.from_env({**base, name: value}) != baseline:
            wrong[name] = value
        # a number that does not parse falls back to the default, so it would pass the check above: a variable
        # read as a number (a number changes the setting, text does not) must be documented with a number
        number_read = Settings.from_env({**base, name: "12345"}) != baseline
        try:
            text_ignored = Settings.from_env({**base, name: "not a number"}) == baseline
        except ConfigurationError:  # refused outright (a host name may not hold spaces): not read as a number
            text_ignored = False
        reads_a_number = number_read and text_ignored
        if reads_a_number and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", value):
            wrong[name] = value
    return wrong


def test_each_default_in_code_font_is_the_default_settings_uses() -> None:
    defaults = literal_defaults(documented())
    assert len(defaults) > 50, defaults  # most rows have a literal default; the rest are described in words
    assert wrong_defaults(defaults) == {}, (
        "docs/configuration.md gives a default that settings.py does not use"
    )


def test_a_wrong_default_is_caught() -> None:
    defaults = literal_defaults(documented())
    mistakes = {
        "PORT": "6633",
        "QUEEN_PUSH_MAX_CONCURRENT": "one",
        "JWT_ALGORITHM": "RS256",
        "PG_PORT": "5433",
        "QUEENPY_SERVICES": "false",
        "POP_WAIT_BACKOFF_MULTIPLIER": "3.0",
    }
    assert wrong_defaults({**defaults, **mistakes}) == mistakes
