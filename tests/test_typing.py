"""mypy over the whole package (configured in setup.cfg's ``[mypy]``) finds nothing."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(300)
def test_mypy_finds_no_errors():
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", "/tmp/mypy-cache-"
                             + str(os.getuid()) + ROOT.replace("/", "-")],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
