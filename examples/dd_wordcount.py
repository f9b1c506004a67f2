"""Differential word count: counts that update as lines arrive (and as lines are retracted).

Each round, new lines go in (and, in round 3, an earlier line is taken back); the count of
every word is maintained by ``count()``, which only touches the words that changed. What is
printed at each round is the *change* to the counts: a word's old count retracted (-1) and its
new count added (+1).

    python examples/dd_wordcount.py -w2
"""
from __future__ import annotations

import sparktimely as st
import sparktimely.differential as dd

ROUNDS = [
    ["the quick brown fox", "jumps over the lazy dog"],
    ["the dog barks"],
    ["a quick brown dog"],
    ["-the dog barks", "the end"],             # a leading "-" retracts a line sent before
]


def wordcount(worker: st.Worker, rounds: list[list[str]] = ROUNDS) -> list[tuple]:
    """``(round, (word, count), diff)``: the count changes this worker reports."""
    lines = dd.InputSession()
    changes: list = []

    def build(scope):
        counts = (lines.to_collection(scope)
                  .flat_map(str.split)
                  .count())
        return counts.inspect(changes.append).probe()
    probe = worker.dataflow(build, name="dd-wordcount")
    for round, batch in enumerate(rounds):
        for i, line in enumerate(batch):
            if i % worker.peers == worker.index:          # each worker sends its share
                if line.startswith("-"):
                    lines.remove(line[1:])
                else:
                    lines.insert(line)
        lines.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(round + 1))
    lines.close()
    return [(time, data, diff) for data, time, diff in changes]


def main(argv: list[str] | None = None) -> None:
    parts = st.execute_from_args(st.timely_parser(description=__doc__).parse_args(argv),
                                 wordcount)
    changes = sorted(change for part in parts for change in part)
    for round in range(len(ROUNDS)):
        shown = [f"{word}={count}({diff:+d})" for time, (word, count), diff in changes
                 if time == round]
        print(f"round {round}: " + " ".join(shown))


if __name__ == "__main__":
    main()
