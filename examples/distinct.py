"""timely's "distinct": each worker sends a few values; duplicates vanish after an exchange.

    python examples/distinct.py -w2   # worker 0 prints 0 2 4, worker 1 prints 1 3 5 7
"""
import sparktimely as st

DATA = {0: [0, 1, 2, 2, 2, 3, 3, 4], 1: [0, 0, 3, 4, 4, 5, 7, 7]}


def distinct(worker: st.Worker) -> list[int]:
    """The distinct values that landed on this worker."""
    input = st.InputHandle()
    seen: list[int] = []

    def ctor(capability, info):
        capability.drop()
        counts_by_time: dict = {}

        def logic(input, output):
            for cap, batch in input:
                counts = counts_by_time.setdefault(cap.time, {})
                fresh = [x for x in batch if x not in counts]
                for x in batch:
                    counts[x] = counts.get(x, 0) + 1
                output.give_at(cap, list(dict.fromkeys(fresh)))
        return logic

    def build(scope):
        return (scope.input_from(input)
                .unary(st.Exchange(lambda x: x), "Distinct", ctor)
                .inspect(lambda x: print(f"worker {worker.index}:\tvalue {x}", flush=True))
                .inspect(seen.append)
                .probe())
    probe = worker.dataflow(build, name="distinct")
    input.send_batch(DATA.get(worker.index, []))
    input.advance_to(1)
    worker.step_while(lambda: probe.less_than(input.time()))
    return sorted(seen)


if __name__ == "__main__":
    st.execute_from_args(st.timely_parser(description=__doc__).parse_args(), distinct)
