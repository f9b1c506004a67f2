"""Every Python block of README.md and docs/*.md runs as written, as a program of its own in
an empty folder (``doc_blocks``: blocks not meant to run are marked so, with a reason)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from doc_blocks import DOCUMENTS, ROOT, python_blocks

BLOCKS = [pytest.param(path, code, id=f"{path.relative_to(ROOT)}:{line}")
          for path in DOCUMENTS for line, code in python_blocks(path)]


def test_the_readme_has_runnable_blocks_and_few_exceptions():
    assert len(BLOCKS) >= 7
    assert len(python_blocks(ROOT / "README.md", runnable=False)) <= 1     # the Spark calls


@pytest.mark.timeout(90)
@pytest.mark.parametrize("path, code", BLOCKS)
def test_the_block_runs_as_written(path, code, tmp_path):
    (tmp_path / "block.py").write_text(code)
    ran = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=80)
    assert ran.returncode == 0, f"{code}\n--- stderr:\n{ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
