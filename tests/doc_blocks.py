"""The Python blocks of the project's Markdown documents (README.md, docs/*.md): every
```` ```python ```` fence, with the line it starts on. A block that is not meant to run as
written says so on the line before its fence (``<!-- not run: why -->``), or uses another
fence language (```` ```text ````)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")


def python_blocks(path: Path, *, runnable: bool = True) -> list[tuple[int, str]]:
    """``(first line number, code)`` of the ```` ```python ```` blocks of ``path`` meant to
    run (``runnable=False``: of those marked not to run)."""
    blocks, language, start, lines, marked, previous = [], None, 0, [], False, ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = _FENCE.match(line)
        if fence and language is None:
            language, start, lines = fence[1], number + 1, []
            marked = bool(NOT_RUN.match(previous))
        elif line.rstrip() == "```" and language is not None:
            if language == "python" and marked != runnable:
                blocks.append((start, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(line)
        previous = line
    return blocks
