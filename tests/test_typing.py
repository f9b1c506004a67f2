"""mypy over the whole package, the benchmarks and the examples (configured in setup.cfg's
``[mypy]``) finds nothing."""
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


def mypy_on(program: str, tmp_path, *options: str) -> subprocess.CompletedProcess:
    """mypy (with ``options``) over ``program`` (a user's module, ``job.py``), reading
    sparktimely's own annotations as an installed package's."""
    path = tmp_path / "job.py"
    path.write_text(program)
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file",
                           os.devnull, "--follow-imports=silent", "--ignore-missing-imports",
                           *options, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "MYPYPATH": ROOT})


@pytest.mark.timeout(300)
def test_mypy_sees_the_operators_a_dataflow_uses(tmp_path):
    """``worker.dataflow(build)`` gives ``build`` a ``Scope``, so a misspelt operator in a
    user's program is a type error, not a surprise at run time."""
    result = mypy_on(PROGRAM_WITH_A_TYPO, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'job.py:6: error: "Stream" has no attribute "mapp"' in result.stdout, result.stdout
    assert "Found 1 error" in result.stdout


DIFFERENTIAL_PROGRAM_WITH_A_TYPO = '''
import sparktimely as st
import sparktimely.differential as dd
from sparktimely.io import DirectorySink, FileSource


def counted(data: dd.Reducible) -> dd.Collection:
    return data.count()


def job(worker: st.Worker) -> None:
    edges = dd.InputSession()

    def build(scope: st.Scope) -> dd.TraceHandle:
        pairs = edges.to_collection(scope)
        arranged = pairs.arrange_by_key()
        reached = pairs.map(lambda edge: edge[1]).iterate(lambda nodes: nodes.distinct())
        window = pairs.active_between(lambda edge: edge[0], lambda edge: edge[0] + 10)
        counted(window).concat(counted(arranged)).concat(reached).join(pairs).probe()
        arranged.join_core(arranged, lambda key, a, b: [a]).conut()
        lines = scope.input_from_source(FileSource("in", format="text"), "lines")
        lines.output_to(DirectorySink("out"), "out")
        return arranged.trace

    trace = worker.dataflow(build)
    worker.dataflow(lambda scope: trace.import_(scope).reduce(lambda k, i, o: None).probe())
'''


@pytest.mark.timeout(300)
def test_mypy_sees_the_differential_operators(tmp_path):
    """The stateful operators are real methods of ``dd.Collection`` and ``dd.Arranged``
    (``join``, ``count``, ``iterate``, ``active_between``, ``join_core``, ``trace.import_``),
    ``dd.Reducible`` takes either, and the built-in sources and sinks are ``Source`` and
    ``Sink``: mypy accepts all of them and finds the one misspelt operator."""
    result = mypy_on(DIFFERENTIAL_PROGRAM_WITH_A_TYPO, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ('job.py:20: error: "Collection" has no attribute "conut"; maybe "count"?'
            in result.stdout), result.stdout
    assert "Found 1 error" in result.stdout, result.stdout


WORKING_PROGRAM_THE_ANNOTATIONS_REFUSED = '''
from typing import Any

import numpy as np
import pyarrow as pa
import sparktimely as st
import sparktimely.differential as dd
from sparktimely import barrier
from sparktimely.io import DirectorySink
from sparktimely.logging import log_stream

KEYS = ("k1", "k2")
TOTALS = {"total": ("sum", "v"), "most": ("max", "v")}


def route(x: int) -> np.int64:
    return np.int64(x)


def notified(input: Any, output: Any, notificator: st.Notificator) -> None:
    for cap, batch in input:
        output.session(cap).give_batch(batch)
    for cap, count in notificator:
        output.session(cap).give(-1)


def build(scope: st.Scope) -> st.ProbeHandle:
    numbers = scope.to_stream(range(4))
    parts = scope.concatenate(numbers.filter(bool) for _ in range(3))
    parts.exchange(route).unary_notify(st.Exchange(route), "N", range(2), notified).probe()
    parts.map(lambda x: (x, 1)).aggregate(lambda k, v, a: (a or 0) + v, lambda k, a: (k, a),
                                          route)
    rows = scope.to_stream([pa.record_batch({"k1": [1], "k2": [2], "v": [3]})])
    rows.exchange(key=KEYS).aggregate_batches(list(KEYS), TOTALS).probe()
    dd.concatenate(scope, (dd.from_stream(numbers) for _ in range(2))).probe()
    return numbers.probe()


def logged(scope: st.Scope) -> st.Stream:
    return log_stream(scope).map(str)


def job(worker: st.Worker) -> int:
    worker.dataflow(build)
    return worker.index


indexes: list[int] = st.execute(job, workers=2, checkpoint_dir=None)
index: int = st.execute_directly(job)
captured: st.Capture = st.example(lambda scope: scope.to_stream([1]).capture())
sink = DirectorySink("out")


def table(df: Any) -> Any:
    return barrier.map_in_arrow(df, lambda scope, stream: stream, "x long")
'''


@pytest.mark.timeout(300)
def test_mypy_accepts_what_runs_and_types_what_a_job_returns(tmp_path):
    """Routes returning numpy integers, key columns as a tuple, an aggs dict held in a
    variable, generators of streams to concatenate and a range of init_times all run (API.md
    says so) and were type errors; the results of execute, execute_directly and example
    were Any, so a misuse of them went unseen."""
    program = WORKING_PROGRAM_THE_ANNOTATIONS_REFUSED
    result = mypy_on(program, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    wrong = program + "st.execute_directly(job).upper()\nst.example(build).mapp()\n"
    result = mypy_on(wrong, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"int" has no attribute "upper"' in result.stdout, result.stdout
    assert '"ProbeHandle" has no attribute "mapp"' in result.stdout, result.stdout
    assert "Found 2 errors" in result.stdout, result.stdout


WINDOWED_PROGRAM = '''
import sparktimely as st
import sparktimely.windows as win


def windowed(clicks: st.Stream) -> win.WindowOut[st.Stream]:
    return clicks.window(win.Tumbling(10), time_of=lambda r: int(r), aggregate=win.count())


def late(out: win.WindowOut[st.Stream]) -> st.Stream:
    return out.late


def bare(out: win.WindowOut) -> st.Stream:
    return out.late
'''


@pytest.mark.timeout(300)
def test_mypy_strict_accepts_window_out_annotated_as_api_md_says(tmp_path):
    """``win.WindowOut`` is generic in its streams' type and Python 3.11 has no TypeVar
    defaults, so docs/API.md says to annotate it ``win.WindowOut[st.Stream]``: that passes
    ``mypy --strict``, and the bare name is the error the page warns of."""
    result = mypy_on(WINDOWED_PROGRAM, tmp_path, "--strict")
    assert result.stdout.splitlines() == [
        'job.py:14: error: Missing type arguments for generic type "WindowOut"  [type-arg]',
        'job.py:15: error: Returning Any from function declared to return "Stream"  '
        '[no-any-return]',
        "Found 2 errors in 1 file (checked 1 source file)"], result.stdout + result.stderr
