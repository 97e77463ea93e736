"""The README's and docs/'s links and file references resolve inside the repository (#15 item 7):
a markdown link to a file or a heading, and a path written in backticks (`gateway/cli/main.py`,
`configs/examples/tls-and-sasl.yaml`), must name something that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "deploy").rglob("*.md"))]

_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: a path in backticks that starts with one of the repository's top-level directories
_TOP = "|".join(re.escape(p.name) for p in REPO.iterdir() if p.is_dir() and not p.name.startswith("."))
_PATH = re.compile(rf"`((?:{_TOP})/[\w./-]*\w)(?::\w+)?`")
#: files the documentation names but that are made on the user's machine, not shipped
_MADE_LOCALLY = ("configs/examples/certs/",)


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in md.read_text().splitlines():
        if m := re.match(r"#+\s+(.*)", line):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(doc):
    broken = []
    for target in _LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_file_references_resolve(doc):
    missing = sorted({p for p in _PATH.findall(doc.read_text())
                      if not (REPO / p).exists() and not p.startswith(_MADE_LOCALLY)})
    assert not missing, f"{doc.relative_to(REPO)} names files that do not exist: {missing}"
