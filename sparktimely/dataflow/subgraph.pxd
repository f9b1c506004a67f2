# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Dataflow:
    cdef public object _cursor, _deferred, _edges, _frontier_watchers, _heap, _held
    cdef public object _input_handles, _inputs_at, _loops, _on_drop, _queued
    cdef public object _sent_while_built, _unordered_inputs, dropped, gathering, graph, index
    cdef public object moved, name, named, operators, peers, progress, running, scopes, shape
    cdef public object tracker, update, worker
    cdef dict __dict__
    cdef object __weakref__
