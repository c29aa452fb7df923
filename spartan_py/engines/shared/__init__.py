"""What every kernel family's engine uses: CUDA plumbing, the GPU and twin engine bases, the layer plan,
launch scheduling, the kernel-trace base, transfer records, column merging (the cpu engine's too)."""
