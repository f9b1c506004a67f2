# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Capability:
    cdef public object _time, _port, _live
    cdef dict __dict__
    cdef object __weakref__

cdef class InputCapability:
    cdef public object time, _outputs, _summaries, _operator, _activation
    cdef dict __dict__
    cdef object __weakref__

cdef class CapabilitySet:
    cdef public object _caps
    cdef dict __dict__
    cdef object __weakref__
