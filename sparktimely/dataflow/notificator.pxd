# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class FrontierNotificator:
    cdef public object _available, _pending, _ready, _requested
    cdef dict __dict__
    cdef object __weakref__

cdef class Notificator:
    cdef public object _activate, _frontiers, _inner
    cdef dict __dict__
    cdef object __weakref__
