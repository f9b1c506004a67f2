# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Link:
    cdef public object _closing, _cond, _drain, _end, _framed, _frames, _goodbye, _handed
    cdef public object _in_flight, _large, _stage, _start, _wake, _writer, ended, failure, fd
    cdef public object me, name, peer, sock
    cdef dict __dict__
    cdef object __weakref__
