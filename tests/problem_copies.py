"""Copies of shipped problems with other SMALL sizes, for tests that run a campaign end to end at sizes the
interpreter gets through quickly (the shipped files stay as they are)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"


def resized(root: Path, sizes: Mapping[str, tuple[str, str]]) -> list[str]:
    """For each problem (path under problems/ -> (its SMALL dict as written, the one to use)), a copy under root
    at the same level and name with SMALL replaced; a problem whose SMALL line is not as given fails here."""
    files = []
    for rel, (small, new) in sizes.items():
        text = (PROBLEMS / rel).read_text()
        assert f"SMALL = {small}" in text, (rel, small)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.replace(f"SMALL = {small}", f"SMALL = {new}", 1))
        files.append(str(root / rel))
    return files
