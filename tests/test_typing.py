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


PROGRAM_WITH_A_TYPO = '''
import sparktimely as st


def job(worker: st.Worker) -> None:
    worker.dataflow(lambda scope: scope.to_stream([1, 2]).mapp(str).probe())
'''


@pytest.mark.timeout(300)
def test_mypy_sees_the_operators_a_dataflow_uses(tmp_path):
    """``worker.dataflow(build)`` gives ``build`` a ``Scope``, so a misspelt operator in a
    user's program is a type error, not a surprise at run time."""
    program = tmp_path / "job.py"
    program.write_text(PROGRAM_WITH_A_TYPO)
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file",
                             os.devnull, "--follow-imports=silent", "--ignore-missing-imports",
                             str(program)], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "MYPYPATH": ROOT})
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'job.py:6: error: "Stream" has no attribute "mapp"' in result.stdout, result.stdout
    assert "Found 1 error" in result.stdout
