"""Every script and make target the README and docs/*.md name exists. A script named in the
sentence or line that also says "since removed" (a figure made by a script git still holds) is
exempt."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = re.compile(r"scripts/([A-Za-z0-9_]+\.(?:py|sh))")
MAKE = re.compile(r"\bmake\s+([a-z][a-z0-9-]*)")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def missing_scripts(text: str) -> list[str]:
    out = []
    for m in SCRIPT.finditer(text):
        line_rest = text[m.end() :].split("\n", 1)[0]
        sentence_rest = re.split(r"\.\s|\n\s*\n", text[m.end() :], maxsplit=1)[0]
        if any("since removed" in " ".join(s.split()) for s in (line_rest, sentence_rest)):
            continue
        if not (REPO / "scripts" / m.group(1)).is_file():
            out.append(m.group(0))
    return out


def missing_targets(text: str) -> list[str]:
    """`make X` in code (fenced blocks, then inline spans) naming no target of the Makefile."""
    targets = set(re.findall(r"^([A-Za-z0-9_-]+):", (REPO / "Makefile").read_text(), re.M))
    fenced = re.findall(r"^```.*?^```", text, re.M | re.S)
    inline = re.findall(r"`([^`]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    return [f"make {t}" for code in fenced + inline for t in MAKE.findall(code) if t not in targets]


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.name)
def test_doc_names_only_existing_scripts_and_targets(doc):
    text = doc.read_text()
    assert missing_scripts(text) == []
    assert missing_targets(text) == []


def test_the_check_can_fail():
    assert missing_scripts("run `python scripts/no_such_probe.py --x` here.") == ["scripts/no_such_probe.py"]
    assert missing_scripts("`python scripts/no_such_probe.py` (at commit abc1234, since\nremoved).") == []
    assert missing_scripts("`scripts/no_such_probe.py`. Later\nit is since removed.") != []
    assert missing_targets("run `make no-such-target` first") == ["make no-such-target"]
    assert missing_targets("run `make gpu-parity` first") == []
