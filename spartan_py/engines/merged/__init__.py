"""The merged kernel (``kernels/gc_merged.cu``, ``kernels/gc_chain.cu``): backend ``gpu-merged`` and its
CPU twin ``gpu-merged-twin``."""
