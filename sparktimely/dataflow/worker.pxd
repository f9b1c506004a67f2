# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class WorkerCore:
    cdef public object _allocator, _alone_wakeup, _building, _built, _busy_at, _collected
    cdef public object _dataflow_count, _dataflows, _deferred, _dropped, _early, _failure
    cdef public object _finished
    cdef public object _finished_peers, _observer, _observers, _remote_activations
    cdef public object _salt_warned, _stepping, args, exchanged_arrow, index, peers, steps
    cdef dict __dict__
    cdef object __weakref__
