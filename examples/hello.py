"""timely's "hello": ten rounds of input on worker 0, exchanged by value.

    python examples/hello.py -w2      # worker 0 sees the even values, worker 1 the odd ones
"""
import sparktimely as st


def hello(worker: st.Worker) -> list[int]:
    """The values this worker saw, in order."""
    input = st.InputHandle()
    seen: list[int] = []

    def build(scope):
        return (scope.input_from(input)
                .exchange(lambda x: x)
                .inspect(lambda x: print(f"worker {worker.index}:\thello {x}", flush=True))
                .inspect(seen.append)
                .probe())
    probe = worker.dataflow(build, name="hello")
    for round in range(10):
        if worker.index == 0:
            input.send(round)
        input.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(input.time()))
    return seen


if __name__ == "__main__":
    st.execute_from_args(st.timely_parser(description=__doc__).parse_args(), hello)
