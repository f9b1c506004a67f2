# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class ProgressExchange:
    cdef public object peers, tracker, _local, _initial, _judged
    cdef dict __dict__
    cdef object __weakref__
