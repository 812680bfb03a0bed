"""Every image in docs/img is shown by a doc, and every image a doc shows is there.

An image no doc references is a figure of a design nobody reads about any more (the
old BudgetMix - fixed plots contradicted the README); a reference to a missing
image is a broken page.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
#: Markdown image or link targets under an img/ folder, relative to the doc.
REFERENCE = re.compile(r"\]\(([^)\s]*img/[^)\s]+)\)|src=\"([^\"]*img/[^\"]+)\"")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _referenced() -> dict[Path, list[Path]]:
    """``{image path: docs that reference it}``, resolved against each doc's folder."""
    found: dict[Path, list[Path]] = {}
    for doc in _docs():
        for match in REFERENCE.finditer(doc.read_text(encoding="utf-8")):
            target = (doc.parent / (match.group(1) or match.group(2))).resolve()
            found.setdefault(target, []).append(doc)
    return found


def test_every_image_in_docs_img_is_referenced_from_a_doc() -> None:
    referenced = _referenced()
    images = sorted(p.resolve() for p in IMG.iterdir() if p.is_file())
    assert images, "docs/img holds no image"
    stale = [p.name for p in images if p not in referenced]
    assert not stale, f"docs/img images no doc references (remove them): {stale}"


def test_every_referenced_image_exists() -> None:
    missing = {
        str(p.relative_to(ROOT)): [str(d.relative_to(ROOT)) for d in docs]
        for p, docs in _referenced().items()
        if p.is_relative_to(ROOT) and not p.is_file()
    }
    assert not missing, f"docs reference images that do not exist: {missing}"
