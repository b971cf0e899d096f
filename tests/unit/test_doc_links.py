"""Every relative link and image of README.md and docs/*.md resolves: the file exists, and a ``#fragment``
names a heading of the target page (GitHub's anchors). Links are found by parsing the Markdown
(markdown-it-py, which rich brings), so code blocks and code spans are not mistaken for links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PARSER = MarkdownIt("commonmark").enable("table")


def walk(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        if token.children:
            yield from walk(token.children)


def links(text: str) -> list[str]:
    """The targets of the page's links and images."""
    found = []
    for token in walk(PARSER.parse(text)):
        if token.type == "link_open":
            found.append(str(token.attrGet("href")))
        elif token.type == "image":
            found.append(str(token.attrGet("src")))
    return found


def anchors(text: str) -> set[str]:
    """GitHub's anchors of the page's headings: lower case, punctuation dropped, spaces as hyphens, and a
    repeated heading numbered ``-1``, ``-2``."""
    tokens = PARSER.parse(text)
    seen: dict[str, int] = {}
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        words = "".join(
            child.content for child in inline.children or [] if child.type in ("text", "code_inline")
        )
        slug = re.sub(r"[^\w\- ]", "", words.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def broken(page: Path) -> list[str]:
    wrong = []
    for target in links(page.read_text(encoding="utf-8")):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or target.startswith("mailto:"):
            continue  # not a file of this repository
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            wrong.append(f"{target}: no such file")
        elif (
            parts.fragment and path.suffix == ".md" and parts.fragment not in anchors(path.read_text("utf-8"))
        ):
            wrong.append(f"{target}: no such heading")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken(page) == []


def test_the_checker_finds_links_and_tells_broken_ones(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n## Background services\n## Background services\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#background-services) [ok](other.md#background-services-1) [ok](#a-heading)\n"
        "![missing](pictures/none.png) [missing](other.md#nowhere) [web](https://example.com/x.md)\n"
        "`[not a link](nowhere.md)`\n\n```\n[not a link](nowhere.md)\n```\n# A heading\n"
    )
    assert broken(page) == ["pictures/none.png: no such file", "other.md#nowhere: no such heading"]
