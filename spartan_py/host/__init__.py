"""Host parallelism: where independent pieces of work run (:mod:`.executors`: this process, a
process pool, a Dask cluster) and kernels spread over the host's cores on threads (:mod:`.threads`)."""
