"""The README starts with the user (issue 34 item 3): what it is, the two commands, the
Quickstart and one line per integration come first; the long figures live in
docs/benchmarks.md and docs/experiment.md, which the README links.

Before, a user scrolled past the experiment's intervals and about 150 lines of
benchmark medians before reaching the Quickstart.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _sections() -> list[str]:
    return re.findall(r"^## (.+)$", README, flags=re.M)


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else len(README)]


def test_the_first_sections_are_quickstart_material() -> None:
    first = _sections()[:3]
    assert first[0] == "Two commands"
    assert first[1].startswith("Quickstart")
    assert first[2] == "Which example do I open"
    before = README[: README.index("## Which example do I open")]
    assert "|---" not in before  # no table of figures before the integrations
    assert before.count("\n") < 80  # the quickstart is within the first screenful or two


def test_one_line_per_integration_with_links_that_exist() -> None:
    which = _section("Which example do I open")
    items = [ln for ln in which.splitlines() if ln.startswith("- **")]
    names = " ".join(ln.split("**")[1] for ln in items)
    for name in ("OpenAI", "Anthropic", "Pydantic AI", "LangChain", "smolagents", "LiteLLM"):
        assert name in names, name
    assert "DSPy" in names and "Agno" in names and "gateway" in names
    for target in re.findall(r"\]\(([^)#]+)[^)]*\)", which):
        assert (ROOT / target).exists(), target
    doc = (ROOT / "docs" / "integrations.md").read_text()
    for frag in re.findall(r"\]\(docs/integrations\.md#([^)]+)\)", which):
        heads = re.findall(r"^#+ (.+)$", doc, flags=re.M)
        slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}
        assert frag in slugs, frag


def test_the_long_figures_are_linked_not_inlined() -> None:
    assert "docs/benchmarks.md" in _section("Performance")
    assert (ROOT / "docs" / "benchmarks.md").read_text().startswith("# Benchmarks")
    assert "docs/experiment.md#the-main-jobs-figures-stage-by-stage" in README
    experiment = (ROOT / "docs" / "experiment.md").read_text()
    assert "## The main job's figures, stage by stage" in experiment
    assert "bench/overhead.py --timer cpu" in (ROOT / "docs" / "benchmarks.md").read_text()
