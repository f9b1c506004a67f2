"""The picture of a dataflow: the exact DOT text of a known graph (nested scopes, a loop,
an exchange, a region), the same graph from a live worker and from its logs, the
annotations the logs add, and drawing with Graphviz when it is installed."""
from __future__ import annotations

import re

import pytest

import sparktimely as st
from sparktimely.logging import (GraphvizMissing, graph_of, has_graphviz, log_to_directory,
                                 read_log_directory, render, summarize, to_dot)

KNOWN = r'''digraph dataflow {
  graph [fontname="Helvetica", fontsize=11];
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=11];
  edge [fontname="Helvetica", fontsize=9];
  subgraph "cluster_0" {
    label="numbers";
    "op1" [label="ToStream"];
    "op2" [label="Enter"];
    "op8" [label="Exchange"];
    "op9" [label="Probe"];
    subgraph "cluster_0_-1" {
      label="iterative-1";
      "op0" [label="Feedback(Product(0, 1))"];
      "op3" [label="Concatenate"];
      "op4" [label="Map"];
      "op5" [label="Filter"];
      "op6" [label="Filter"];
      "op7" [label="Leave"];
    }
    subgraph "cluster_0_-2" {
      label="region-2";
      "op10" [label="Say \"hi\""];
    }
  }
  subgraph "cluster_1" {
    label="dataflow-1";
    "op11" [label="Input"];
    "op12" [label="Probe"];
  }
  "op1" -> "op2" [label="Pipeline"];
  "op2" -> "op3" [label="Pipeline"];
  "op0" -> "op3" [label="Pipeline", style=dashed];
  "op3" -> "op4" [label="Pipeline"];
  "op4" -> "op5" [label="Pipeline"];
  "op5" -> "op0" [label="Pipeline"];
  "op4" -> "op6" [label="Pipeline"];
  "op6" -> "op7" [label="Pipeline"];
  "op7" -> "op8" [label="Exchange"];
  "op8" -> "op9" [label="Pipeline"];
  "op8" -> "op10" [label="Pipeline"];
  "op11" -> "op12" [label="Pipeline"];
}'''


def build(scope):
    """Numbers 1..9 doubled in a loop until they pass 100, exchanged, then inspected in a
    region by an operator whose name needs quoting."""
    def loop(inner):
        handle, looped = inner.loop_variable(1)
        doubled = scope.to_stream(range(1, 10)).enter(inner).concat(looped).map(lambda x: 2 * x)
        doubled.filter(lambda x: x < 100).connect_loop(handle)
        return doubled.filter(lambda x: x >= 100).leave()
    result = scope.iterative(loop).exchange(lambda x: x)
    probe = result.probe()

    def say(inner):
        def ctor(capability, info):
            capability.drop()
            return lambda input, output: [output.give_at(c, b) for c, b in input]
        return result.enter(inner).unary(st.Pipeline, 'Say "hi"', ctor)
    scope.region(say)
    return probe


def job(worker):
    worker.dataflow(build, name="numbers")
    input = st.InputHandle()
    worker.dataflow(lambda scope: scope.input_from(input).probe())
    input.close()
    return to_dot(worker)


def test_the_dot_text_of_a_known_graph(run):
    assert run(job) == [KNOWN] * run.workers


def test_a_scope_pictures_its_own_dataflow_while_it_is_built(run):
    def job(worker):
        worker.dataflow(build, name="numbers")
        pictures = []
        worker.dataflow(lambda scope: pictures.append(to_dot(scope.to_stream([1]).scope)))
        return pictures[0]
    for dot in run(job):
        assert '"op11" [label="ToStream"];' in dot and "numbers" not in dot


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_logs_give_the_same_picture_annotated_with_time_and_records(tmp_path, workers):
    def job(worker):
        log_to_directory(worker, tmp_path)
        worker.dataflow(build, name="numbers")
        input = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(input).probe())
        input.close()
    st.execute(job, workers=workers)
    logs = read_log_directory(tmp_path)
    assert graph_of(logs) == graph_of(logs.events)
    plain = to_dot(graph_of(logs))
    assert plain == KNOWN
    annotated = to_dot(logs)
    # each worker makes 1..9 and doubles each until it reaches 100 or more
    doubles = [[x << k for k in range(1, 8) if (x << (k - 1)) < 100] for x in range(1, 10)]
    mapped = workers * sum(len(d) for d in doubles)
    looped = workers * sum(1 for d in doubles for y in d if y < 100)
    made = workers * 9
    assert re.search(r'"op4" -> "op5" \[label="Pipeline\\n' + f"{mapped:,}" + r' records"\]',
                     annotated)
    assert re.search(r'"op5" -> "op0" \[label="Pipeline\\n' + f"{looped:,}" + r' records"\]',
                     annotated)
    assert re.search(r'"op7" -> "op8" \[label="Exchange\\n' + f"{made}" + r' records"\]',
                     annotated)
    runs = f"{workers} run{'' if workers == 1 else 's'}"            # ToStream once per worker
    assert re.search(r'"op1" \[label="ToStream\\n[0-9.e+-]+ ms, ' + f"{runs}, {made} out"
                     + r'", fillcolor="#ff[0-9a-f]{4}"\];', annotated)
    assert re.search(r'"op12" \[label="Probe\\n[0-9.e+-]+ ms, \d+ runs?", ', annotated)
    # the busiest operator is red; another within a shade of it (timing under load) may be too
    busy = {op: stats.busy_ns for op, stats in summarize(logs.events).operators.items()}
    hottest = max(busy, key=busy.__getitem__)
    red = set(map(int, re.findall(r'"op(\d+)" \[[^\]]*fillcolor="#ff8700"', annotated)))
    assert hottest in red
    assert all(busy[op] * 255 > busy[hottest] * 254 for op in red)


@pytest.mark.skipif(not has_graphviz(), reason="Graphviz's dot is not installed "
                                               "(apt-get install graphviz)")
def test_graphviz_draws_the_picture(tmp_path):
    svg = render(st.execute_directly(lambda worker: (worker.dataflow(build), worker)[1]),
                 tmp_path / "flow.svg")
    text = open(svg).read()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for name in ("iterative&#45;1", "Feedback(Product(0, 1))", "Say &quot;hi&quot;",
                 "Exchange"):
        assert name in text
    png = render(st.execute_directly(lambda worker: (worker.dataflow(build), worker)[1]),
                 tmp_path / "flow.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_without_graphviz_drawing_says_how_to_install_it_and_dot_text_still_works(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    worker = st.execute_directly(lambda worker: (worker.dataflow(build), worker)[1])
    with pytest.raises(GraphvizMissing, match="apt-get install graphviz"):
        render(worker, tmp_path / "flow.svg")
    assert open(render(worker, tmp_path / "flow.dot")).read() == to_dot(worker)
