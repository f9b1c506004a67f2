# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class _JoinSides:
    cdef public object name, mode, f, total, kind, traces, since, acknowledged, joiner
    cdef public object forms_checked
    cdef dict __dict__
    cdef object __weakref__
