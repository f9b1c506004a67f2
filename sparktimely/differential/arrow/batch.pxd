# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class ArrowBatch:
    cdef public object _data, _hash_set, _integer_key, _numpy, _order, _time_range, hashes
    cdef public object key, kind, lower, since, times, upper
    cdef dict __dict__
    cdef object __weakref__

cdef class PiecewiseMerge:
    cdef public object batches, bounds, next, pieces, rows, since
    cdef dict __dict__
    cdef object __weakref__
