# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class OutputPort:
    cdef public object dataflow, location, kind, pushers, consumers, held
    cdef dict __dict__
    cdef object __weakref__

cdef class InputPort:
    cdef public object queue, dataflow, location, operator, frontier, _outputs, _summaries
    cdef public object _admits, _held
    cdef dict __dict__
    cdef object __weakref__

cdef class Session:
    cdef public object _handle, _port, _time, _buffer
    cdef dict __dict__
    cdef object __weakref__

cdef class OutputHandle:
    cdef public object _port, _index, _sessions, _pending, queue_limit
    cdef dict __dict__
    cdef object __weakref__
