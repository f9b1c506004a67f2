# Declarations for the compiled build only (Cython reads this beside _mesh.py; the pure-Python
# module ignores it): the ring classes become extension types whose attributes are struct
# fields, read without the dictionary lookups of a plain class. A ``__dict__`` keeps any other
# attribute settable, as on the plain class.

cdef class _Out:
    cdef public object ep, target, gen, pending, pending_bytes, seg, cap, q, buf, head, tail
    cdef dict __dict__
    cdef object __weakref__

cdef class _In:
    cdef public object ep, src, gen, closed, copy_below, _joining, _joined
    cdef public object seg, cap, q, buf, read, tail, leases
    cdef dict __dict__
    cdef object __weakref__
