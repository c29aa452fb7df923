"""The merged kernel's compiled modules (``kernels/gc_merged.cu``, ``kernels/gc_chain.cu``), built
once per device and set of options by CuPy for :class:`~spartan_py.engines.merged.engine.MergedEngine`."""

from __future__ import annotations

import functools

from spartan_py.engines.merged.chain import CHAIN_GROUP_ROWS, CHAIN_MAX_COLUMNS, CHAIN_TEAM_WARPS, chain_block_threads
from spartan_py.engines.merged.plan import merged_module_options
from spartan_py.engines.shared.input_counts import COUNT_MAX_STEPS
from spartan_py.resources import kernel_source


@functools.cache
def merged_kernels(
    device_id: int,
    threads: int,
    instances: tuple[tuple[int, bool], ...],
    later: bool = False,
    defines: tuple[str, ...] = (),
):
    """Compile kernels/gc_merged.cu once per device, block size, module (first launches, or
    ``later`` block-tile launches: :func:`~spartan_py.engines.merged.plan.merged_module_options`)
    and set of instances: ({(R, bits): gc_merged<R, bits>} of ``instances``, scatter, expand);
    the ``bits`` instances run first launches of binary inputs. Only the instances an engine
    launches are built: all twelve took 39 s of a cold start (CuPy's kernel cache empty; one
    H200 host). ``defines``: further nvcc options (a variant's:
    :func:`~spartan_py.engines.merged.variants.kernel_defines`)."""
    # optional dependency (extra gpu)
    import cupy

    names = {(rows, bits): f"gc_merged<{rows}, {str(bits).lower()}>" for rows, bits in instances}
    module = cupy.RawModule(
        code=kernel_source("gc_merged.cu"),
        options=(
            "-std=c++17",
            *merged_module_options(threads, later),
            f"-DGM_COUNT_MAX={COUNT_MAX_STEPS}",
            "-DGM_NO_EXPLICIT_INSTANCES",
            *defines,
        ),
        name_expressions=list(names.values()),
    )
    kernels = {key: module.get_function(name) for key, name in names.items()}
    return kernels, module.get_function("gm_scatter_rows"), module.get_function("gm_expand_rows")


@functools.cache
def chain_kernels(device_id: int, defines: tuple[str, ...] = ()):
    """Compile kernels/gc_chain.cu once per device: {(columns a lane, rows a team, warps a
    team): gc_chain<C, G, P>} (a lane of a pair computes half the columns of a lone warp's);
    ``defines``: further nvcc options, as :func:`merged_kernels`'."""
    # optional dependency (extra gpu)
    import cupy

    names = {
        (columns, rows, warps): f"gc_chain<{columns}, {rows}, {warps}>"
        for warps in CHAIN_TEAM_WARPS
        for columns in range(1, CHAIN_MAX_COLUMNS // warps + 1)
        for rows in CHAIN_GROUP_ROWS
    }
    module = cupy.RawModule(
        code=kernel_source("gc_chain.cu"),
        options=(
            "-std=c++17",
            f"-DCH_THREADS={chain_block_threads(1)}",
            f"-DCH_PAIR_THREADS={chain_block_threads(2)}",
            "-DCH_NO_EXPLICIT_INSTANCES",
            *defines,
        ),
        name_expressions=list(names.values()),
    )
    return {key: module.get_function(name) for key, name in names.items()}
