"""timely's "simple" example: ten rounds of input, each record printed with its time.

    python examples/simple.py
"""
import argparse

import sparktimely as st


def main() -> list:
    def job(worker):
        input = st.InputHandle()
        seen = []
        probe = worker.dataflow(lambda scope: scope.input_from(input)
                                .inspect_time(lambda t, x: seen.append((t, x))).probe())
        for round in range(10):
            input.send(round)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(input.time()))
        return seen
    return st.execute_directly(job)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter
                            ).parse_args()         # --help, and no arguments
    for time, record in main():
        print(f"seen: {record} at time {time}")
