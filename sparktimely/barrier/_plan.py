"""From what the barrier tasks tell each other to the layout of the job (pure; no Spark here).

Every task sends one :class:`TaskAddress` through ``BarrierTaskContext.allGather`` and gets
back everyone's, ordered by partition. :class:`TaskPlan` turns that into what the
communication layer needs: the hostfile (one ``host:port`` per worker, by partition), the
``WorkerAddress`` plan for ``sparktimely.comm.build_allocator``, and this worker's
shared-memory group (the tasks with the same host identity), whose lowest partition creates
the mesh under the name it proposed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..comm import WorkerAddress


@dataclass(frozen=True)
class TaskAddress:
    """What one barrier task tells the others: its partition (= worker index), the host and
    port of its listener, its host identity (who can share memory with it) and the name
    prefix it would give a shared-memory mesh if it were its group's creator."""

    partition: int
    host: str
    port: int
    identity: str
    prefix: str

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
    >>> plan = TaskPlan.from_gathered([t.to_json() for t in tasks], 2)
    >>> plan.hostfile
    ['a:4000', 'b:4001', 'a:4002']
    >>> plan.group, plan.slot, plan.creates_mesh, plan.mesh_prefix
    ([0, 2], 1, False, 'sparktimely-1-f-0')
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
    def peers(self) -> int:
        return len(self.tasks)

    @property
    def hostfile(self) -> list[str]:
        """``host:port`` of every worker's listener, by worker index."""
        return [WorkerAddress(t.host, t.port, t.identity).address for t in self.tasks]

    @property
    def addresses(self) -> list[WorkerAddress]:
        """The plan ``sparktimely.comm.build_allocator`` takes."""
        return [WorkerAddress(t.host, t.port, t.identity, f"Spark partition {t.partition}")
                for t in self.tasks]

    @property
    def group(self) -> list[int]:
        """The workers sharing memory with this one (itself included), in index order."""
        mine = self.tasks[self.index].identity
        return [t.partition for t in self.tasks if t.identity == mine]

    @property
    def slot(self) -> int:
        """This worker's slot in its group's mesh."""
        return self.group.index(self.index)

    @property
    def creates_mesh(self) -> bool:
        return self.group[0] == self.index

    @property
    def mesh_prefix(self) -> str:
        """The mesh name: the prefix proposed by the group's lowest partition."""
        return self.tasks[self.group[0]].prefix

    @property
    def hosts(self) -> int:
        """How many distinct host identities the job spans."""
        return len({t.identity for t in self.tasks})
