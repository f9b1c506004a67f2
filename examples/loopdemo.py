"""timely's "loopdemo"-style Collatz iteration in a cycle of the top-level scope.

Each number is stepped (n -> n/2 or 3n+1) around a feedback edge whose summary advances the
time by 1, until it reaches 1; the time at which a number leaves the loop is its step count.

    python examples/loopdemo.py 27 97
"""
import argparse

import sparktimely as st


def collatz_steps(seeds: list[int]) -> list[tuple[int, int]]:
    """``(steps, seed)`` for each seed, computed by the dataflow: a number that has reached
    1 leaves the loop, the others take one step and go round again, one time later.

    >>> sorted(collatz_steps([1, 6]))
    [(0, 1), (8, 6)]
    """
    def build(scope):
        handle, looped = scope.feedback(1)
        numbers = scope.to_stream([(seed, seed) for seed in seeds]).concat(looped)
        going, done = numbers.branch(lambda t, p: p[1] == 1)
        going.map(lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1)) \
            .connect_loop(handle)
        return done.map(lambda p: p[0]).capture()
    return [(time, seed) for time, seeds_done in st.example(build).extract()
            for seed in seeds_done]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seeds", nargs="*", type=int, default=[27, 97, 871], metavar="N",
                        help="the numbers to follow to 1 (default: 27 97 871)")
    for steps, seed in collatz_steps(parser.parse_args().seeds):
        print(f"{seed} reaches 1 after {steps} steps")
