# Declarations for the compiled build only (see sparktimely/shm/_mesh.pxd).

cdef class EncodingAllocator:
    cdef public object index, peers
    cdef dict __dict__
    cdef object __weakref__

cdef class ShmAllocator(EncodingAllocator):
    cdef public object endpoint
