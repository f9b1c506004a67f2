"""Event-time windows over sensor readings that arrive out of order, some very late.

Four sensors report a temperature every 10 seconds of event time (epoch milliseconds, here
from 0). Readings reach the job up to 4 seconds late, and a few are held up for minutes.
Each worker sends its share through a ``win.EventTimeInput`` with ``out_of_order=5000``: its
timely time follows the readings' event times minus 5 s, and the frontier over all workers
is the watermark. The job reports, per sensor:

- the mean of each 1-minute window (``win.Tumbling``), once the watermark passes its end;
- the maximum over the last 5 minutes, every minute (``win.Sliding``);
- the readings too late for their 1-minute window, as they arrive.

What a window reports depends only on the timely time each reading was sent at (the
watermark of the input it went through), never on batching, scheduling or which worker holds
a sensor's windows.

    python examples/sensor_windows.py -w 2
"""
from __future__ import annotations

import random

import sparktimely as st
import sparktimely.windows as win

MINUTE = 60_000
SENSORS = ["s0", "s1", "s2", "s3"]


def readings(minutes: int = 12, seed: int = 4) -> list[tuple[int, str, int, int]]:
    """``(id, sensor, event_time, tenths of a degree)`` in the order they arrive: up to 4 s
    after their event time, every 29th one 2.5 minutes after it."""
    rng = random.Random(seed)
    sent = []
    for i, ts in enumerate(range(0, minutes * MINUTE, 10_000 // len(SENSORS))):
        sensor = SENSORS[i % len(SENSORS)]
        value = 200 + 10 * (i % len(SENSORS)) + rng.randrange(-15, 16)
        delay = 150_000 if i % 29 == 28 else rng.randrange(4000)
        sent.append((ts + delay, (i, sensor, ts, value)))
    return [reading for _, reading in sorted(sent)]


def sensor_windows(worker: st.Worker, arriving: list | None = None) -> dict[str, list]:
    """This worker's reports: ``means`` and ``maxima`` as ``(time, sensor, window, value)``
    and ``late`` as ``(time, reading)``; it sends every ``peers``-th reading."""
    arriving = readings() if arriving is None else arriving
    sensor_input = win.EventTimeInput(out_of_order=5000)
    reports: dict[str, list] = {"means": [], "maxima": [], "late": []}

    def build(scope):
        readings = scope.input_from(sensor_input)
        sensor, event_time, value = (lambda r: r[1]), (lambda r: r[2]), (lambda r: r[3])
        means = readings.window(win.Tumbling(MINUTE), time_of=event_time, key=sensor,
                                aggregate=win.mean(value))
        maxima = readings.window(win.Sliding(5 * MINUTE, MINUTE), time_of=event_time,
                                 key=sensor, aggregate=win.max(value))
        means.results.inspect_time(lambda t, r: reports["means"].append((t, *r)))
        maxima.results.inspect_time(lambda t, r: reports["maxima"].append((t, *r)))
        return means.late.inspect_time(lambda t, r: reports["late"].append((t, r))).probe()
    probe = worker.dataflow(build, name="sensor-windows")
    for reading in arriving[worker.index::worker.peers]:
        sensor_input.send(reading, reading[2])
        worker.step_while(lambda: probe.less_than(sensor_input.time()))
    sensor_input.close()
    worker.run()
    return reports


def clock(ms: int) -> str:
    return f"{ms // MINUTE:02d}:{ms % MINUTE // 1000:02d}"


def report(parts: list[dict[str, list]]) -> list[str]:
    """The lines to print for the workers' reports: means, then maxima, then late readings."""
    means, maxima, late = (sorted(r for part in parts for r in part[name])
                           for name in ("means", "maxima", "late"))
    return ([f"{sensor} mean  [{clock(w.start)}, {clock(w.end)}): {mean / 10:.2f} C"
             for _, sensor, w, mean in means] +
            [f"{sensor} max   [{clock(w.start)}, {clock(w.end)}): {top / 10:.1f} C"
             for _, sensor, w, top in maxima] +
            [f"{sensor} late  reading of {clock(ts)} ({value / 10:.1f} C) arrived at "
             f"watermark {clock(time)}" for time, (_, sensor, ts, value) in late])


if __name__ == "__main__":
    options = st.timely_parser(description=__doc__).parse_args()
    print("\n".join(report(st.execute_from_args(options, sensor_windows))))
