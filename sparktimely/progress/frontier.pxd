# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Antichain:
    cdef public object _elements
    cdef dict __dict__
    cdef object __weakref__

cdef class MutableAntichain:
    cdef public object _counts, _frontier, _ints
    cdef dict __dict__
    cdef object __weakref__

cdef class ChangeBatch:
    cdef public object _changes
    cdef dict __dict__
    cdef object __weakref__
