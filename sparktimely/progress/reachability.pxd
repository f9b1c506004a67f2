# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Tracker:
    cdef public object _edges, _implications, _internal, _is_target, _kinds, _node_of
    cdef public object _order_key, _pending, _pointstamps, _pop, _push, _sources, _targets
    cdef public object _tracked
    cdef dict __dict__
    cdef object __weakref__
