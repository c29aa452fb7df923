"""The rows kernel (``kernels/gc_layer.cu``): backend ``gpu`` and its CPU twin ``gpu-twin``."""
