"""From what the barrier tasks tell each other to the layout of the job (pure; no Spark here).

Every task sends one :class:`TaskAddress` through ``BarrierTaskContext.allGather`` and gets
back everyone's, ordered by partition. :class:`TaskPlan` turns that into the peer list
``sparktimely.execute`` runs workers with: one ``WorkerAddress`` per worker, by partition,
whose shared-memory group (the tasks with the same host identity) uses the name its lowest
partition proposed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..execute import WorkerAddress


@dataclass(frozen=True)
class TaskAddress:
    """What one barrier task tells the others: its partition (= worker index), the host and
    port of its listener, its host identity (who can share memory with it) and the name
    prefix it would give a shared-memory mesh if it were its group's creator.

    >>> from sparktimely.barrier import TaskAddress
    >>> task = TaskAddress(1, "node-2", 40123, "node-2/ipc:[1]", "sparktimely-7-f-0")
    >>> TaskAddress.from_json(task.to_json()) == task
    True
    """

    partition: int
    host: str
    port: int
    identity: str
    prefix: str

    @classmethod
    def of(cls, partition: int, address: WorkerAddress) -> TaskAddress:
        """What a task whose seat is at ``address`` tells the others."""
        return cls(partition, address.host, address.port, address.group, address.mesh)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TaskAddress:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class TaskPlan:
    """The job as one task sees it.

    >>> tasks = [TaskAddress(0, "a", 4000, "host-a", "sparktimely-1-f-0"),
    ...          TaskAddress(1, "b", 4001, "host-b", "sparktimely-2-f-0"),
    ...          TaskAddress(2, "a", 4002, "host-a", "sparktimely-3-f-0")]
    >>> plan = TaskPlan.from_gathered([t.to_json() for t in reversed(tasks)], 2)
    >>> [(a.address, a.group, a.mesh) for a in plan.addresses]   # doctest: +NORMALIZE_WHITESPACE
    [('a:4000', 'host-a', 'sparktimely-1-f-0'), ('b:4001', 'host-b', 'sparktimely-2-f-0'),
     ('a:4002', 'host-a', 'sparktimely-1-f-0')]
    """

    index: int
    tasks: tuple[TaskAddress, ...]

    @classmethod
    def from_gathered(cls, messages: list[str], index: int) -> TaskPlan:
        """The plan from ``allGather``'s answer (one JSON per task, any order)."""
        tasks = sorted((TaskAddress.from_json(m) for m in messages), key=lambda t: t.partition)
        if [t.partition for t in tasks] != list(range(len(tasks))):
            raise ValueError(f"barrier tasks reported partitions {[t.partition for t in tasks]}"
                             f", expected 0..{len(tasks) - 1}")
        if not 0 <= index < len(tasks):
            raise IndexError(f"worker index {index} is not in 0..{len(tasks) - 1}")
        return cls(index, tuple(tasks))

    @property
    def addresses(self) -> list[WorkerAddress]:
        """The peer list for ``sparktimely.execute``: one address per worker, by partition;
        each host group's shared memory is named by its first task.

        >>> tasks = [TaskAddress(0, "::1", 7, "x", "sparktimely-1-f-0")]
        >>> TaskPlan.from_gathered([tasks[0].to_json()], 0).addresses[0].address
        '[::1]:7'
        """
        first: dict[str, str] = {}
        for t in self.tasks:
            first.setdefault(t.identity, t.prefix)
        return [WorkerAddress(t.host, t.port, t.identity, f"Spark partition {t.partition}",
                              first[t.identity]) for t in self.tasks]
