# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class TraceAgent:
    cdef public object _box, _closed, _logical, _physical
    cdef dict __dict__
    cdef object __weakref__
