"""The user docs hold together: every relative link in README.md, CHANGELOG.md, docs/**/*.md and
the benchmarks' and examples' READMEs points at a file that exists (and, for an `#anchor` into
Markdown, at a heading that exists), and the README stays a short guide whose first commands are
`make demo` and `make test`."""
# suite: check (make check runs this file: scripts/check.sh)

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]

# Pages another change of this session adds; a link to one is accepted while it is absent and
# checked like any other once it exists. Remove an entry when its page has landed.
PENDING: set = set()

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def doc_files() -> List[Path]:
    files = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md"))
    files += sorted((REPO / "examples").glob("*/README.md"))
    return [f for f in files if f.exists()]


def _lines(path: Path) -> Iterator[Tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def links(path: Path) -> Iterator[Tuple[int, str]]:
    """(line number, target) of every Markdown link outside code blocks and code spans."""
    for number, line in _lines(path):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: code and link markup dropped, lower case, characters other
    than letters, digits, '_', '-' and spaces dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    """The anchors of `path`'s headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: Dict[str, int] = {}
    for _, line in _lines(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            if n:
                seen[f"{base}-{n}"] = 1
    return set(seen)


def test_slug_matches_github() -> None:
    assert slug("Batches built in C++") == "batches-built-in-c"
    assert slug("What to read: `fields`, `max_len`, `verify`") == \
        "what-to-read-fields-max_len-verify"
    assert slug("Planning from the index: `libshard info --batches`") == \
        "planning-from-the-index-libshard-info---batches"
    assert slug("LibTorch: `libshard::torch`") == "libtorch-libshardtorch"


def test_link_extraction_skips_code() -> None:
    sample = REPO / "README.md"
    found = [target for _, target in links(sample)]
    assert found, "README.md has links"
    assert not any(t.startswith("`") for t in found)


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for number, target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
        if not dest.exists():
            if rel not in PENDING:
                broken.append(f"{doc.relative_to(REPO)}:{number}: {target} ({rel} does not exist)")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{doc.relative_to(REPO)}:{number}: {target} (no heading "
                          f"'#{anchor}' in {rel})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move detail to docs/guide/"
    commands = [l.split("#")[0].strip() for l in lines if l.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"], commands[:3]


def test_guide_index_lists_every_page() -> None:
    guide = REPO / "docs" / "guide"
    index = (guide / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for _, target in links(guide / "README.md")}
    pages = {p.name for p in guide.glob("*.md") if p.name != "README.md"}
    missing = sorted(pages - linked)
    assert not missing, f"docs/guide/README.md does not link {missing}"
    assert index
