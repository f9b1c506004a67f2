# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class Operator:
    cdef public object _seen, activations, address, blocked, gated, handles, index, inputs
    cdef public object interest, logic, name, outputs, poked, watches_frontiers
    cdef dict __dict__
    cdef object __weakref__
