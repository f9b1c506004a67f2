"""timely's "loopdemo"-style Collatz iteration in a cycle of the top-level scope.

Each number is stepped (n -> n/2 or 3n+1) around a feedback edge whose summary advances the
time by 1, until it reaches 1; the time at which a number leaves the loop is its step count.

    python examples/loopdemo.py 27 97        # -w2: the numbers are exchanged between two
"""
import sparktimely as st
from sparktimely.execute import at_least


def collatz_job(worker: st.Worker, seeds: list[int]) -> list[tuple[int, int]]:
    """``(steps, seed)`` for the seeds that left the loop on this worker: worker 0 gives the
    seeds, a number that has reached 1 leaves the loop, the others take one step and go
    round again, one time later, exchanged by value.

    >>> sorted(st.execute_directly(lambda worker: collatz_job(worker, [1, 6])))
    [(0, 1), (8, 6)]
    """
    def build(scope):
        handle, looped = scope.feedback(1)
        mine = seeds if worker.index == 0 else []
        numbers = scope.to_stream([(seed, seed) for seed in mine]).concat(looped) \
            .exchange(lambda p: p[1])
        going, done = numbers.branch(lambda t, p: p[1] == 1)
        going.map(lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1)) \
            .connect_loop(handle)
        return done.map(lambda p: p[0]).capture()
    captured = worker.dataflow(build, name="loopdemo")
    worker.run()
    return [(time, seed) for time, seeds_done in captured.extract() for seed in seeds_done]


if __name__ == "__main__":
    parser = st.timely_parser(description=__doc__, checkpoints=False)
    parser.add_argument("seeds", nargs="*", type=at_least(1), default=[27, 97, 871],
                        metavar="N", help="the numbers to follow to 1 (default: 27 97 871)")
    options = parser.parse_args()
    parts = st.execute_from_args(options, lambda worker: collatz_job(worker, options.seeds))
    for steps, seed in sorted(pair for part in parts for pair in part):
        print(f"{seed} reaches 1 after {steps} steps")
