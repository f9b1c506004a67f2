"""timely's "simple" example: ten rounds of input on every worker, each record printed with
its time.

    python examples/simple.py          # one worker; with -w2 each of two has its own rounds
"""
import sparktimely as st


def simple(worker: st.Worker, show: bool = False) -> list[tuple[int, int]]:
    """The ``(time, record)`` pairs this worker saw (printed as seen, with ``show``): one
    record per round, at its round.

    >>> st.execute_directly(simple)[:3]
    [(0, 0), (1, 1), (2, 2)]
    """
    input = st.InputHandle()
    seen: list[tuple[int, int]] = []
    who = f"worker {worker.index}: " if worker.peers > 1 else ""

    def see(time: int, record: int) -> None:
        seen.append((time, record))
        if show:
            print(f"{who}seen: {record} at time {time}", flush=True)
    probe = worker.dataflow(lambda scope: scope.input_from(input).inspect_time(see).probe(),
                            name="simple")
    for round in range(10):
        input.send(round)
        input.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(input.time()))
    return seen


if __name__ == "__main__":
    st.execute_from_args(st.timely_parser(description=__doc__).parse_args(),
                         lambda worker: simple(worker, show=True))
