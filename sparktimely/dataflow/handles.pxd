# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class InputHandle:
    cdef public object _bound, _buffer, _closed, _connected, _records_sent, _schema, _time, name
    cdef dict __dict__
    cdef object __weakref__

cdef class ProbeHandle:
    cdef public object _frontiers, _minimum
    cdef dict __dict__
    cdef object __weakref__
