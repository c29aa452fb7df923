// Sparse DNN Graph Challenge: one fused layer Y_out = min(clamp, ReLU(Y_in @ W + bias)),
// the bias only on non-zero entries of Y_in @ W, with on-device live-row compaction and a
// fused sparsity monitor. Compiled at run time by CuPy (RawModule, name expressions for the
// template instances) and, in CI, by nvcc for sm_80 and sm_90.
//
// Layout
//   y_in, y_out : live rows only, row-major [rows x n] float32.
//   ids_in/out  : the input-row number of each live row.
//   w_idx,w_val : ELL, k-major: input index / weight of output j's k-th input at
//                 [k * n + j] (coalesced across j), ordered so that a warp's 32 reads at
//                 each step hit 32 different banks; padding reads a zero entry n + b.
//   counts      : counts[l] = live rows entering layer l (0-based). A launch runs layers
//                 layer .. layer + layer_count - 1 on the counts[layer] rows of y_in: each
//                 block keeps its tile in shared memory across those layers (a row's output
//                 depends on that row alone) and adds its live rows to counts[l + 1] after
//                 every layer; at the last one that addition also gives the tile's output
//                 positions (compaction). The host never needs a row count between layers.
//   w_*_ptrs    : per-layer device pointers (as 64-bit integers) of the weights below.
//   nnz_counts  : nnz_counts[layer + 1] += non-zeros written by this layer.
//   tile_nnz    : optional monitor, per output row: non-zeros of each 32-column tile
//                 [row * (n / 32) + tile], one byte each (a count is at most 32, and the
//                 monitor's traffic is what it costs); row_nnz: optional per-row count.
//   last_tiles  : with the monitor, where the launch's last layer keeps its outputs in another
//                 order than the natural one (spartan_py/engines/support/neuron_order.py): the
//                 natural 32-column tile of the neuron at each output position, so that the
//                 monitor counts natural tiles; null where positions are the neurons' numbers.
//   row_layers  : optional, row_layers[l] += the rows each tile computed at layer l (a tile
//                 stops once all its rows are dead; after a launch's first layer it computes
//                 its live rows rounded up to 4, see compact_tiles), so the trace's executed
//                 multiply-adds are exact whatever order compaction left the rows in;
//   tile_layers : with row_layers, tile_layers[l] += 1 for each tile that computed layer l
//                 (each loads all of the layer's indices, however many rows it computes: the
//                 trace's weight loads).
//   compact_tiles: non-zero: a tile of 8, 12 or 16 rows moves its live rows to its front after
//                 every layer of a launch but the last and computes the next layer on the
//                 fewest multiple of 4 rows that holds them (its own instance of the sums).
//   pixel_columns, pixel_degree, input_value: null, 0 and 0, or the counts path of the
//                 first launch (spartan_py/engines/support/input_counts.py): every stored
//                 input entry is input_value and every weight of layer 0 is one value, so an
//                 output's sum is the fmaf chain of its lit inputs' count. Each row's lit
//                 pixels add one to the count of every output they feed (pixel p's outputs at
//                 pixel_columns[p * pixel_degree ..], GC_NO_COLUMN past its degree; at most
//                 32), and each output reads its sum from the chain: the same floats, bit for
//                 bit, for about a tenth of the shared-memory traffic on the official inputs.
//                 Where the launch's dynamic shared memory holds the pixel table after the
//                 tile (RowKernelTrace.plan_pixel_table decides; the kernel reads the size it
//                 was given), each block copies the table there once and reads it from there.
//
// Work split: a block of THREADS threads holds a tile of R rows in shared memory; thread t
// owns output columns t, t + THREADS, ... (CPT of them). For each of its columns it walks
// the column's K inputs once, reusing each weight for the R rows. The tile's rows are
// overwritten in place with their outputs (after a barrier), then the live ones are copied
// out to a compacted position taken with one atomicAdd per tile. The grid is persistent:
// blocks stride over tiles until counts[layer] is exhausted.

#ifndef GC_THREADS
#define GC_THREADS 512
#endif
// Each tile row in shared memory has PAD extra always-zero entries, one per bank: the
// weight schedule (spartan_py/engines/bank_schedule.py) points steps where an output has
// no input at a zero entry in a bank no other thread of the warp reads at that step.
#define PAD 32
#ifndef GC_COUNT_MAX
#define GC_COUNT_MAX 64  // layer 0's steps at most, for the counts path (input_counts.COUNT_MAX_STEPS)
#endif
#define GC_NO_COLUMN 0xffffu  // input_counts.NO_COLUMN
// Build options for measuring the kernel against itself (benchmarks): groups of four steps
// whose indices are loaded ahead, and whether launches of few rows shrink their tiles.
#ifndef GC_PREFETCH_GROUPS
#define GC_PREFETCH_GROUPS 2
#endif
#ifndef GC_SHRINK_TILES
#define GC_SHRINK_TILES 1
#endif

// The counts path keeps output j's count at this position of its row: a pixel's outputs
// (e.g. j, j + 64, j + 128, ... in RadiX-Net layers) then fall in different banks.
__device__ __forceinline__ int gc_count_slot(int j) { return j ^ ((j >> 5) & 31); }

// Output j's sums over the R tile rows, step by step in the plan's order. A load brings four
// steps' indices (or weights): w_idx and w_val are [step / 4][n][4] (LayerPlan.grouped). The
// next Q groups' indices are loaded while the current Q are summed, so that a warp waits on
// them once a layer rather than once a step.
template <int R, int Q, bool WEIGHTS>
__device__ __forceinline__ void gc_column_sums(const float* __restrict__ tile, const unsigned short* __restrict__ w_idx,
                                               const float* __restrict__ w_val, float w_uniform, int n, int k, int j,
                                               float (&acc)[R]) {
    const uint2* __restrict__ idx4 = reinterpret_cast<const uint2*>(w_idx);
    const float4* __restrict__ val4 = reinterpret_cast<const float4*>(w_val);
    const int groups = k / 4;  // k is a multiple of 4 (plan_layer pads it)
    uint2 next[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) next[q] = __ldg(idx4 + (size_t)min(q, groups - 1) * n + j);
#pragma unroll 1
    for (int g0 = 0; g0 < groups; g0 += Q) {
        uint2 step[Q];
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            step[q] = next[q];
            next[q] = __ldg(idx4 + (size_t)min(g0 + Q + q, groups - 1) * n + j);
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            if (g0 + q < groups) {
                // the weights (rare: the Graph Challenge's are uniform) are not loaded ahead
                const float4 w4 = WEIGHTS ? __ldg(val4 + (size_t)(g0 + q) * n + j) : make_float4(w_uniform, w_uniform, w_uniform, w_uniform);
                const int i[4] = {(int)(step[q].x & 0xffffu), (int)(step[q].x >> 16), (int)(step[q].y & 0xffffu), (int)(step[q].y >> 16)};
                const float w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r] = fmaf(w[u], tile[r * (n + PAD) + i[u]], acc[r]);
            }
        }
    }
}

// The first R rows of the tile (of RO held; rows R .. RO - 1 are zero and give zeros).
template <int R, int RO, int CPT>
__device__ __forceinline__ void gc_tile_compute(const float* __restrict__ tile, const unsigned short* __restrict__ w_idx,
                                                const float* __restrict__ w_val, float w_uniform, int n, int k,
                                                float bias, float clamp, float (&out)[CPT][RO]) {
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
        const int j = c * GC_THREADS + threadIdx.x;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        // groups of four steps in flight: one where a thread keeps many outputs (whose
        // registers it needs)
#if __CUDA_ARCH__ >= 900
        constexpr int Q = CPT >= 4 ? 1 : GC_PREFETCH_GROUPS;
#else  // sm_80 spills the R >= 12 instances at 2
        constexpr int Q = 1;
#endif
        if (w_val)
            gc_column_sums<R, Q, true>(tile, w_idx, w_val, w_uniform, n, k, j, acc);
        else
            gc_column_sums<R, Q, false>(tile, w_idx, w_val, w_uniform, n, k, j, acc);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float z = acc[r];
            const float y = fminf(fmaxf(z + bias, 0.0f), clamp);
            out[c][r] = (z != 0.0f) ? y : 0.0f;
        }
#pragma unroll
        for (int r = R; r < RO; ++r) out[c][r] = 0.0f;
    }
}

// In-tile compaction (gc_layer_tiles): a tile of RT rows moves its live rows to its front
// after each layer of a launch but the last, and computes the next layer on the fewest
// multiple of 4 rows that holds them. layer_plan.compacts_tile is the same rule.
template <int RT, int CPT>
__device__ __forceinline__ void gc_tile_compute_rows(int rows, const float* __restrict__ tile,
                                                     const unsigned short* __restrict__ w_idx,
                                                     const float* __restrict__ w_val, float w_uniform, int n, int k,
                                                     float bias, float clamp, float (&out)[CPT][RT]) {
    if constexpr (RT % 4 == 0 && RT >= 8) {
        if (rows <= 4) { gc_tile_compute<4, RT, CPT>(tile, w_idx, w_val, w_uniform, n, k, bias, clamp, out); return; }
        if constexpr (RT > 8) {
            if (rows <= 8) { gc_tile_compute<8, RT, CPT>(tile, w_idx, w_val, w_uniform, n, k, bias, clamp, out); return; }
        }
        if constexpr (RT > 12) {
            if (rows <= 12) { gc_tile_compute<12, RT, CPT>(tile, w_idx, w_val, w_uniform, n, k, bias, clamp, out); return; }
        }
    }
    gc_tile_compute<RT, RT, CPT>(tile, w_idx, w_val, w_uniform, n, k, bias, clamp, out);
}

// Counts path, input side: the tile's counts (R rows of NS words, output j at
// gc_count_slot(j)) from the rows' lit pixels. GC_THREADS / 32 / R warps share a row, each
// taking every so many groups of 32 of its pixels; lane s adds one to pixel p's s-th output,
// eight pixels' table reads in flight before their additions. An addition is a predicated
// shared reduction (no branch: around each atomicAdd the compiler put a convergence region
// and a warp-aggregated increment, about 45 instructions per four pixels in all), the
// table's address the lane's own column plus a 32-bit offset; not inlined, so that its
// registers do not push the 16-row instance's layer loop into spilling.
__device__ __forceinline__ void gc_count_add(unsigned address, unsigned column) {
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, %2;\n\t@p red.shared.add.u32 [%0], 1;\n\t}" ::"r"(address),
        "r"(column), "r"(GC_NO_COLUMN)
        : "memory");
}

// STAGED: the table sits in dynamic shared memory after the block's RA-row tile (32-bit
// shared loads instead of 64-bit global addresses and read-only loads).
template <int R, int NS, int RA, bool STAGED>
__device__ __noinline__ void gc_count_inputs(unsigned* __restrict__ counts, const int* __restrict__ csr_ptr,
                                                const int* __restrict__ csr_idx, int first, int rows,
                                                const unsigned short* __restrict__ pixel_columns, int pixel_degree) {
    constexpr int WARPS = GC_THREADS / 32;
    constexpr int SPLIT = WARPS >= R ? WARPS / R : 1;
    constexpr int AHEAD = 8;
    const int lane = threadIdx.x & 31;
    extern __shared__ float gc_dynamic[];
    const unsigned short* __restrict__ own =  // the lane's output of each pixel
        (STAGED ? reinterpret_cast<const unsigned short*>(gc_dynamic + RA * NS) : pixel_columns) + lane;
    const bool has_column = lane < pixel_degree;
    for (int item = threadIdx.x >> 5; item < R * SPLIT; item += WARPS) {
        const int r = item % R, row = first + r;
        if (row >= rows) continue;
        const unsigned row_counts = static_cast<unsigned>(__cvta_generic_to_shared(counts + r * NS));
        const int end = __ldg(csr_ptr + row + 1);
        for (int e0 = __ldg(csr_ptr + row) + (item / R) * 32; e0 < end; e0 += SPLIT * 32) {
            const int pixel = e0 + lane < end ? __ldg(csr_idx + e0 + lane) : 0;
            const int lit = min(32, end - e0);
            for (int q0 = 0; q0 < lit; q0 += AHEAD) {
                unsigned column[AHEAD];
#pragma unroll
                for (int u = 0; u < AHEAD; ++u) {
                    const unsigned p = __shfl_sync(0xffffffffu, pixel, (q0 + u) & 31);
                    const unsigned short* entry = own + p * pixel_degree;
                    column[u] = (q0 + u < lit && has_column) ? (STAGED ? *entry : __ldg(entry)) : GC_NO_COLUMN;
                }
#pragma unroll
                for (int u = 0; u < AHEAD; ++u) gc_count_add(row_counts + 4u * gc_count_slot((int)column[u]), column[u]);
            }
        }
    }
}

// Counts path, output side: each output's sum from its count (the fmaf chain), then as
// gc_tile_compute.
template <int R, int CPT>
__device__ __forceinline__ void gc_tile_from_counts(const unsigned* __restrict__ counts, const float* __restrict__ chain,
                                                    float bias, float clamp, float (&out)[CPT][R]) {
    constexpr int NS = CPT * GC_THREADS + PAD;
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
        const int slot = gc_count_slot(c * GC_THREADS + threadIdx.x);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float z = chain[counts[r * NS + slot]];
            const float y = fminf(fmaxf(z + bias, 0.0f), clamp);
            out[c][r] = (z != 0.0f) ? y : 0.0f;
        }
    }
}

// In-tile compaction: the tile's live rows (bit r of live: row r moves to the number of live
// rows before it) to its front, the rows they leave behind zeroed. A row only moves down and
// each thread moves its own columns in row order, so in place is safe. Not inlined: its loop
// state, hoisted into the layer loop, would push the 16-row instance's sums past 64 registers.
template <int RT, int CPT>
__device__ __noinline__ void gc_compact_tile(float* __restrict__ tile, unsigned live, int held, int live_rows) {
    constexpr int NS = CPT * GC_THREADS + PAD;
#pragma unroll 1
    for (int c = 0; c < CPT; ++c) {
        float* const column = tile + c * GC_THREADS + threadIdx.x;
#pragma unroll 1
        for (int r = 0; r < held; ++r) {
            const int to = __popc(live & ((1u << r) - 1u));
            if (((live >> r) & 1u) && to != r) column[to * NS] = column[r * NS];
        }
#pragma unroll 1
        for (int r = live_rows; r < held; ++r) column[r * NS] = 0.0f;
    }
}

// What a block keeps in static shared memory besides the tile: per row of the tile, its
// non-zeros (and per 32 columns at a launch's last layer), its rank among the live rows.
// Counts and held rows alternate between two copies by the layer's parity, so that one
// layer's copy is cleared or written while the other is read without a barrier between; each
// warp keeps its own copy of the held rows (all the same), which it alone writes and reads.
template <int R, int CPT>
struct GcShared {
    int row_count[2][R];
    int tile_count[R][CPT * GC_THREADS / 32];
    int rank[R];
    int row_id[R];  // the launch's input row at each tile position (positions move with compaction)
    int held[2][GC_THREADS / 32];  // rows the tile holds at its front (the rest are zero), each warp its own copy
    int base;
    int any;
    float chain[GC_COUNT_MAX + 1];  // counts path: the sum of c lit inputs
};

// The launch's work on tiles of RT rows (RT <= R, the rows the block's shared memory holds).
template <int R, int RT, int CPT>
__device__ __forceinline__ void gc_layer_tiles(GcShared<R, CPT>& sh, float* __restrict__ tile,
         const float* __restrict__ y_in, const int* __restrict__ ids_in,
         const int* __restrict__ csr_ptr, const int* __restrict__ csr_idx, const float* __restrict__ csr_val,
         float* __restrict__ y_out, int* __restrict__ ids_out,
         const unsigned long long* __restrict__ w_idx_ptrs, const unsigned long long* __restrict__ w_val_ptrs,
         const float* __restrict__ w_uniforms, const int* __restrict__ ks,
         int* __restrict__ counts, unsigned long long* __restrict__ nnz_counts, int layer, int layer_count,
         unsigned char* __restrict__ tile_nnz, int* __restrict__ row_nnz,
         const unsigned short* __restrict__ last_tiles, int* __restrict__ row_layers, int* __restrict__ tile_layers,
         float bias, float clamp, const unsigned short* __restrict__ pixel_columns, int pixel_degree,
         int compact_tiles, int rows, bool table_staged) {
    constexpr int N = CPT * GC_THREADS;
    constexpr int TILES_PER_ROW = N / 32;
    constexpr int NS = N + PAD;  // tile row stride
    const bool counts_input = csr_ptr && pixel_columns;
    const int n_tiles = (rows + RT - 1) / RT;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int last = layer + layer_count - 1;
    // (read where used, from the parameter and shared memory: a register held across the
    // sums would push the 16-row instance past 64 registers)
#define GC_COMPACT (compact_tiles && RT % 4 == 0 && RT >= 8)
#define GC_HELD (sh.held[(l - layer) & 1][warp])
#define GC_COMPUTED ((GC_COMPACT && l != layer) ? min(RT, (GC_HELD + 3) & ~3) : RT)
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        const int first = t * RT;
        if (threadIdx.x < RT) {
            sh.row_id[threadIdx.x] = first + threadIdx.x;
            sh.row_count[0][threadIdx.x] = 0;
        }
        if (lane == 0) sh.held[0][warp] = min(RT, rows - first);
        // 1. load the tile (rows past the end are zero)
        if (csr_ptr) {
            for (int e = threadIdx.x; e < RT * NS / 4; e += GC_THREADS) reinterpret_cast<float4*>(tile)[e] = make_float4(0.f, 0.f, 0.f, 0.f);
            __syncthreads();
            if (counts_input) {
                if (table_staged)
                    gc_count_inputs<RT, NS, R, true>(reinterpret_cast<unsigned*>(tile), csr_ptr, csr_idx, first, rows, pixel_columns, pixel_degree);
                else
                    gc_count_inputs<RT, NS, R, false>(reinterpret_cast<unsigned*>(tile), csr_ptr, csr_idx, first, rows, pixel_columns, pixel_degree);
            } else
            for (int r = warp; r < RT; r += GC_THREADS / 32) {
                const int row = first + r;
                if (row < rows) {
                    for (int e = csr_ptr[row] + lane; e < csr_ptr[row + 1]; e += 32) tile[r * NS + csr_idx[e]] = csr_val[e];
                }
            }
        } else {
            const float4* src = reinterpret_cast<const float4*>(y_in + (size_t)first * N);
            float4* dst = reinterpret_cast<float4*>(tile);
            const int valid_rows = min(RT, rows - first);
            for (int e = threadIdx.x; e < RT * NS / 4; e += GC_THREADS) {
                const int r = e / (NS / 4), c = e - r * (NS / 4);
                dst[e] = (r < valid_rows && c < N / 4) ? __ldg(src + r * (N / 4) + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }

        __syncthreads();  // the tile and the first layer's counts are ready

        // 2. run the chunk's layers on the tile, in shared memory; rows are independent. Per
        //    layer: the sums, a barrier, the outputs in place and their counts, a barrier, and
        //    (every warp from the same counts, so that none waits on another) which rows live;
        //    a barrier after a compaction.
        for (int l = layer; l <= last; ++l) {
            const int parity = (l - layer) & 1;
            // rows computed: the whole tile at the launch's first layer, after it the live
            // rows at the front rounded up to 4 where the tile compacts
            float out[CPT][RT];
            if (counts_input && l == layer)
                gc_tile_from_counts<RT, CPT>(reinterpret_cast<const unsigned*>(tile), sh.chain, bias, clamp, out);
            else
                gc_tile_compute_rows<RT, CPT>(GC_COMPUTED, tile, reinterpret_cast<const unsigned short*>(w_idx_ptrs[l]),
                                              reinterpret_cast<const float*>(w_val_ptrs[l]), w_uniforms[l], N, ks[l],
                                              bias, clamp, out);
            __syncthreads();  // all reads of the inputs are done: the tile may be overwritten

            // store in place; count non-zeros per row and per 32-column tile (the monitor): lane
            // r keeps its warp's count of row r, and the lanes add theirs at once (no branch a row)
            if (threadIdx.x < RT) sh.row_count[parity ^ 1][threadIdx.x] = 0;  // the next layer's (read last a layer ago)
            const int computed = GC_COMPUTED;
#pragma unroll
            for (int c = 0; c < CPT; ++c) {
                const int j = c * GC_THREADS + threadIdx.x;
                int lit_row = 0;
#pragma unroll
                for (int r = 0; r < RT; ++r) {
                    if (r >= computed) break;  // rows past those computed stay zero (uniform)
                    tile[r * NS + j] = out[c][r];
                    const int lit = __popc(__ballot_sync(0xffffffffu, out[c][r] != 0.0f));
                    lit_row = lane == r ? lit : lit_row;
                }
                if (lane < RT) {
                    if (l == last) sh.tile_count[lane][j >> 5] = lit_row;
                    if (lit_row) atomicAdd(&sh.row_count[parity][lane], lit_row);
                }
            }
            __syncthreads();

            // the live rows, by every warp; warp 0 also the per-layer counts (at the chunk's
            // last layer the count also allocates positions) and the rows' ranks and ids
            const int held = GC_HELD;
            const bool live = lane < held && sh.row_count[parity][lane] > 0;
            const unsigned mask = __ballot_sync(0xffffffffu, live);
            const int n_live = __popc(mask);
            const bool compacts = GC_COMPACT && l != last && n_live && n_live < held;
            if (lane == 0) sh.held[parity ^ 1][warp] = compacts ? n_live : held;
            __syncwarp();
            if (warp == 0) {
                const int rank = live ? __popc(mask & ((1u << lane) - 1u)) : -1;
                if (lane < RT) sh.rank[lane] = rank;
                if (GC_COMPACT && l != last) {  // the rows' ids move to their positions after compaction
                    const int id = lane < RT ? sh.row_id[lane] : 0;
                    __syncwarp();
                    if (live) sh.row_id[rank] = id;
                }
                int tile_nnz_sum = live ? sh.row_count[parity][lane] : 0;
                for (int o = 16; o > 0; o >>= 1) tile_nnz_sum += __shfl_down_sync(0xffffffffu, tile_nnz_sum, o);
                if (lane == 0) {
                    if (l == last)
                        sh.base = n_live ? atomicAdd(&counts[l + 1], n_live) : 0;
                    else if (n_live)
                        atomicAdd(&counts[l + 1], n_live);  // (no result: nothing waits on it)
                    if (tile_nnz_sum) atomicAdd(&nnz_counts[l + 1], (unsigned long long)tile_nnz_sum);
                    if (row_layers) {
                        atomicAdd(&row_layers[l], computed);
                        atomicAdd(&tile_layers[l], 1);
                    }
                    sh.any = n_live;
                }
            }
            if (!n_live) break;  // every row of the tile is dead: later layers add nothing (uniform)
            if (compacts) {
                gc_compact_tile<RT, CPT>(tile, mask, held, n_live);
                __syncthreads();  // the next layer reads every thread's columns
            }
        }
        __syncthreads();  // warp 0's ranks, ids, base and count
        if (!sh.any) continue;  // (uniform across the block)

        // 3. the live rows' ids and (monitor) counts, all rows in one pass over every thread;
        //    then the rows themselves, coalesced
        if (threadIdx.x < RT && sh.rank[threadIdx.x] >= 0) {
            const size_t dst_row = (size_t)sh.base + sh.rank[threadIdx.x];
            const int row = sh.row_id[threadIdx.x];
            ids_out[dst_row] = csr_ptr ? row : ids_in[row];
            if (row_nnz) row_nnz[dst_row] = sh.row_count[(last - layer) & 1][threadIdx.x];
        }
        if (tile_nnz && last_tiles) {
            // outputs not in natural order: each position's non-zeros into its natural tile's
            // count, one atomic per tile a warp's positions fall in
            for (int e = threadIdx.x; e < RT * TILES_PER_ROW; e += GC_THREADS) sh.tile_count[e / TILES_PER_ROW][e % TILES_PER_ROW] = 0;
            __syncthreads();
#pragma unroll 1
            for (int c = 0; c < CPT; ++c) {
                const int j = c * GC_THREADS + threadIdx.x;
                const int natural_tile = __ldg(last_tiles + j);
                const unsigned same = __match_any_sync(0xffffffffu, natural_tile);
                const bool leader = lane == __ffs(same) - 1;
#pragma unroll 1
                for (int r = 0; r < RT; ++r) {
                    if (sh.rank[r] < 0) continue;  // a dead row writes no counts (uniform)
                    const int lit = __popc(__ballot_sync(0xffffffffu, tile[r * NS + j] != 0.0f) & same);
                    if (leader && lit) atomicAdd(&sh.tile_count[r][natural_tile], lit);
                }
            }
            __syncthreads();
        }
        if (tile_nnz)
#pragma unroll 1
            for (int e = threadIdx.x; e < RT * TILES_PER_ROW; e += GC_THREADS) {
                const int r = e / TILES_PER_ROW, c = e % TILES_PER_ROW;
                if (sh.rank[r] >= 0) tile_nnz[((size_t)sh.base + sh.rank[r]) * TILES_PER_ROW + c] = (unsigned char)sh.tile_count[r][c];
            }
#pragma unroll 1
        for (int e = threadIdx.x; e < RT * (N / 4); e += GC_THREADS) {  // every thread a float4 of a row
            const int r = e / (N / 4), c = e - r * (N / 4);
            const int rank = sh.rank[r];
            if (rank >= 0) reinterpret_cast<float4*>(y_out + ((size_t)sh.base + rank) * N)[c] = reinterpret_cast<const float4*>(tile + r * NS)[c];
        }
        __syncthreads();  // the tile buffer is reused by the next iteration
    }
#undef GC_COMPUTED
#undef GC_HELD
#undef GC_COMPACT
}


template <int R, int CPT>
__global__ void __launch_bounds__(GC_THREADS, 1)
gc_layer(const float* __restrict__ y_in, const int* __restrict__ ids_in,
         const int* __restrict__ csr_ptr, const int* __restrict__ csr_idx, const float* __restrict__ csr_val,
         float* __restrict__ y_out, int* __restrict__ ids_out,
         const unsigned long long* __restrict__ w_idx_ptrs, const unsigned long long* __restrict__ w_val_ptrs,
         const float* __restrict__ w_uniforms, const int* __restrict__ ks,
         int* __restrict__ counts, unsigned long long* __restrict__ nnz_counts, int layer, int layer_count,
         unsigned char* __restrict__ tile_nnz, int* __restrict__ row_nnz,
         const unsigned short* __restrict__ last_tiles, int* __restrict__ row_layers, int* __restrict__ tile_layers,
         float bias, float clamp, const unsigned short* __restrict__ pixel_columns, int pixel_degree, float input_value,
         int compact_tiles) {
    extern __shared__ float tile[];  // R * (N + PAD) floats
    __shared__ GcShared<R, CPT> sh;
    if (csr_ptr && pixel_columns && threadIdx.x <= ks[layer]) {  // (read after the first tile's barrier)
        float acc = 0.0f;
        for (int c = 0; c < threadIdx.x; ++c) acc = fmaf(w_uniforms[layer], input_value, acc);
        sh.chain[threadIdx.x] = acc;
    }
    const int rows = counts[layer];
    // the counts path's pixel table into shared memory after the tile, where the launch gave room
    bool table_staged = false;
    if (csr_ptr && pixel_columns) {
        constexpr int TILE_BYTES = R * (CPT * GC_THREADS + PAD) * 4;
        const int table_bytes = CPT * GC_THREADS * pixel_degree * 2;  // a multiple of 64
        unsigned dynamic_bytes;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
        table_staged = dynamic_bytes >= TILE_BYTES + table_bytes;
        if (table_staged) {
            const uint4* src = reinterpret_cast<const uint4*>(pixel_columns);
            uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<char*>(tile) + TILE_BYTES);
            for (int e = threadIdx.x; e < table_bytes / 16; e += GC_THREADS) dst[e] = __ldg(src + e);
            // (read after the first tile's zeroing barrier)
        }
    }
#define GC_TILES(RT)                                                                                                    \
    gc_layer_tiles<R, RT, CPT>(sh, tile, y_in, ids_in, csr_ptr, csr_idx, csr_val, y_out, ids_out, w_idx_ptrs, w_val_ptrs, \
                               w_uniforms, ks, counts, nnz_counts, layer, layer_count, tile_nnz, row_nnz, last_tiles, \
                               row_layers, tile_layers, bias, clamp, pixel_columns, pixel_degree, compact_tiles, rows, \
                               table_staged)
    // Fewer rows than one tile of R for every block: tiles of a quarter, half or three quarters
    // of R, the fewest that still give every block one (gc_tile_rows in layer_plan.py), so
    // that the rows spread over all the SMs rather than leave some idle.
    if constexpr (GC_SHRINK_TILES && R >= 8 && R % 4 == 0) {
        const int blocks = gridDim.x;
        if (rows <= blocks * (R / 4)) { GC_TILES(R / 4); return; }
        if (rows <= blocks * (R / 2)) { GC_TILES(R / 2); return; }
        if (rows <= blocks * (3 * R / 4)) { GC_TILES(3 * R / 4); return; }
    }
    GC_TILES(R);
#undef GC_TILES
}

#ifndef GC_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
// Instances used by the engine: (rows per tile, columns per thread) for n = CPT * GC_THREADS.
#define GC_LAYER_INSTANCE(R, CPT)                                                                                   \
    template __global__ void gc_layer<R, CPT>(const float*, const int*, const int*, const int*, const float*, float*, \
                                              int*, const unsigned long long*, const unsigned long long*, const float*, \
                                              const int*, int*, unsigned long long*, int, int, unsigned char*, int*, const unsigned short*, int*, int*, float, float, \
                                              const unsigned short*, int, float, int);
#if GC_THREADS == 1024
GC_LAYER_INSTANCE(12, 1)
GC_LAYER_INSTANCE(16, 1)
GC_LAYER_INSTANCE(8, 1)
GC_LAYER_INSTANCE(4, 1)
GC_LAYER_INSTANCE(2, 1)
GC_LAYER_INSTANCE(4, 4)
GC_LAYER_INSTANCE(1, 16)
#else
GC_LAYER_INSTANCE(16, 2)
GC_LAYER_INSTANCE(12, 2)
GC_LAYER_INSTANCE(8, 2)
GC_LAYER_INSTANCE(4, 2)
GC_LAYER_INSTANCE(2, 2)
GC_LAYER_INSTANCE(4, 8)
GC_LAYER_INSTANCE(1, 32)
#endif
#endif
