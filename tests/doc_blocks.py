"""The Python blocks of the project's Markdown documents (README.md, docs/*.md): every
```` ```python ```` fence, with the line it starts on. A block that is not meant to run as
written uses another fence language (```` ```text ````, ```` ```console ````)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\S*)\s*$")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line number, code)`` of every ```` ```python ```` block of ``path``."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = _FENCE.match(line)
        if fence and language is None:
            language, start, lines = fence[1], number + 1, []
        elif line.rstrip() == "```" and language is not None:
            if language == "python":
                blocks.append((start, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks
