"""timely's "wordcount": running counts of words, reported as each round completes.

Lines go in round by round; words are exchanged by a stable hash so each word is counted
on one worker, which reports the word's new running total once the round is complete.

    python examples/wordcount.py -w2
"""
import sparktimely as st

TEXT = ["the quick brown fox", "jumps over the lazy dog", "the dog barks",
        "a quick brown dog", "the end"]


def word_route(pair) -> int:
    """Same worker for the same word in every process (unlike the salted ``hash``)."""
    return st.stable_hash(pair[0])


def wordcount(worker: st.Worker, lines: list[str] = TEXT) -> list[tuple[int, str, int]]:
    """``(round, word, running count)`` reported by this worker."""
    input = st.InputHandle()
    reports: list = []

    def counter(capability, info):
        capability.drop()
        queues: dict = {}          # time -> (capability, [(word, n)])
        totals: dict = {}

        def logic(input, output):
            for cap, batch in input:
                if cap.time not in queues:
                    queues[cap.time] = (cap.retain(), [])
                queues[cap.time][1].extend(batch)
            for time in sorted(t for t in queues if not input.frontier.less_equal(t)):
                cap, pairs = queues.pop(time)
                changed = {}
                for word, n in pairs:
                    totals[word] = changed[word] = totals.get(word, 0) + n
                output.give_at(cap, sorted(changed.items()))
        return logic

    def build(scope):
        return (scope.input_from(input)
                .flat_map(lambda line: [(word, 1) for word in line.split()])
                .unary_frontier(st.Exchange(word_route), "WordCount", counter)
                .inspect_time(lambda t, wc: reports.append((t, *wc)))
                .probe())
    probe = worker.dataflow(build, name="wordcount")
    for round, line in enumerate(lines):
        if round % worker.peers == worker.index:
            input.send(line)
        input.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(input.time()))
    return reports


if __name__ == "__main__":
    options = st.timely_parser(description=__doc__).parse_args()
    for reports in st.execute_from_args(options, wordcount):
        for round, word, count in reports:
            print(f"round {round}: {word} seen {count} time{'s' if count != 1 else ''}")
