"""Helpers the backends share: CUDA plumbing, layer plans, column merging, weight
storage, CPU kernels and the bases of the GPU engines and their CPU twins."""
