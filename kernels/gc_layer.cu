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
//   tile_layers : optional, tile_layers[l] += 1 for every tile that computed layer l (a
//                 tile stops once all its rows are dead), so the trace's executed
//                 multiply-adds are exact whatever order compaction left the rows in.
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

template <int R, int CPT>
__device__ __forceinline__ void gc_tile_compute(const float* __restrict__ tile, const unsigned short* __restrict__ w_idx,
                                                const float* __restrict__ w_val, float w_uniform, int n, int k,
                                                float bias, float clamp, float (&out)[CPT][R]) {
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
        const int j = c * GC_THREADS + threadIdx.x;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < k; ++kk) {
            const int i = __ldg(w_idx + (size_t)kk * n + j);
            const float w = w_val ? __ldg(w_val + (size_t)kk * n + j) : w_uniform;
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = fmaf(w, tile[r * (n + PAD) + i], acc[r]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float z = acc[r];
            const float y = fminf(fmaxf(z + bias, 0.0f), clamp);
            out[c][r] = (z != 0.0f) ? y : 0.0f;
        }
    }
}

template <int R, int CPT>
__global__ void __launch_bounds__(GC_THREADS, 1)
gc_layer(const float* __restrict__ y_in, const int* __restrict__ ids_in,
         const int* __restrict__ csr_ptr, const int* __restrict__ csr_idx, const float* __restrict__ csr_val,
         float* __restrict__ y_out, int* __restrict__ ids_out,
         const unsigned long long* __restrict__ w_idx_ptrs, const unsigned long long* __restrict__ w_val_ptrs,
         const float* __restrict__ w_uniforms, const int* __restrict__ ks,
         int* __restrict__ counts, unsigned long long* __restrict__ nnz_counts, int layer, int layer_count,
         unsigned char* __restrict__ tile_nnz, int* __restrict__ row_nnz, int* __restrict__ tile_layers,
         float bias, float clamp) {
    constexpr int N = CPT * GC_THREADS;
    constexpr int TILES_PER_ROW = N / 32;
    constexpr int NS = N + PAD;                     // tile row stride
    extern __shared__ float tile[];                 // R * NS floats
    __shared__ int s_row_count[R];
    __shared__ int s_tile_count[R][TILES_PER_ROW];
    __shared__ int s_rank[R];
    __shared__ int s_base;
    __shared__ int s_any;

    const int rows = counts[layer];
    const int n_tiles = (rows + R - 1) / R;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int last = layer + layer_count - 1;

    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        const int first = t * R;
        // 1. load the tile (rows past the end are zero)
        if (csr_ptr) {
            for (int e = threadIdx.x; e < R * NS; e += GC_THREADS) tile[e] = 0.0f;
            __syncthreads();
            for (int r = warp; r < R; r += GC_THREADS / 32) {
                const int row = first + r;
                if (row < rows) {
                    for (int e = csr_ptr[row] + lane; e < csr_ptr[row + 1]; e += 32) tile[r * NS + csr_idx[e]] = csr_val[e];
                }
            }
        } else {
            const float4* src = reinterpret_cast<const float4*>(y_in + (size_t)first * N);
            float4* dst = reinterpret_cast<float4*>(tile);
            const int valid_rows = min(R, rows - first);
            for (int e = threadIdx.x; e < R * NS / 4; e += GC_THREADS) {
                const int r = e / (NS / 4), c = e - r * (NS / 4);
                dst[e] = (r < valid_rows && c < N / 4) ? __ldg(src + r * (N / 4) + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }

        // 2. run the chunk's layers on the tile, in shared memory; rows are independent
        for (int l = layer; l <= last; ++l) {
            if (threadIdx.x < R) s_row_count[threadIdx.x] = 0;
            __syncthreads();
            float out[CPT][R];
            gc_tile_compute<R, CPT>(tile, reinterpret_cast<const unsigned short*>(w_idx_ptrs[l]),
                                    reinterpret_cast<const float*>(w_val_ptrs[l]), w_uniforms[l], N, ks[l], bias,
                                    clamp, out);
            __syncthreads();  // all reads of the inputs are done: the tile may be overwritten

            // store in place; count non-zeros per row and per 32-column tile (the monitor)
#pragma unroll
            for (int c = 0; c < CPT; ++c) {
                const int j = c * GC_THREADS + threadIdx.x;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    tile[r * NS + j] = out[c][r];
                    const int lit = __popc(__ballot_sync(0xffffffffu, out[c][r] != 0.0f));
                    if (lane == 0) {
                        if (l == last) s_tile_count[r][j >> 5] = lit;
                        if (lit) atomicAdd(&s_row_count[r], lit);
                    }
                }
            }
            __syncthreads();

            // per-layer counts; at the chunk's last layer the count also allocates positions
            if (warp == 0) {
                const bool live = lane < R && first + lane < rows && s_row_count[lane] > 0;
                const unsigned mask = __ballot_sync(0xffffffffu, live);
                if (l == last && lane < R) s_rank[lane] = live ? __popc(mask & ((1u << lane) - 1u)) : -1;
                int tile_nnz_sum = live ? s_row_count[lane] : 0;
                for (int o = 16; o > 0; o >>= 1) tile_nnz_sum += __shfl_down_sync(0xffffffffu, tile_nnz_sum, o);
                if (lane == 0) {
                    const int n_live = __popc(mask);
                    const int base = n_live ? atomicAdd(&counts[l + 1], n_live) : 0;
                    if (l == last) s_base = base;
                    if (tile_nnz_sum) atomicAdd(&nnz_counts[l + 1], (unsigned long long)tile_nnz_sum);
                    if (tile_layers) atomicAdd(&tile_layers[l], 1);
                    s_any = n_live;
                }
            }
            __syncthreads();
            if (!s_any) break;  // every row of the tile is dead: later layers add nothing
        }
        if (!s_any) continue;  // (uniform across the block)

        // 3. the live rows' ids and (monitor) counts, all rows in one pass over every thread;
        //    then the rows themselves, coalesced
        if (threadIdx.x < R && s_rank[threadIdx.x] >= 0) {
            const size_t dst_row = (size_t)s_base + s_rank[threadIdx.x];
            ids_out[dst_row] = csr_ptr ? first + threadIdx.x : ids_in[first + threadIdx.x];
            if (row_nnz) row_nnz[dst_row] = s_row_count[threadIdx.x];
        }
        if (tile_nnz)
#pragma unroll 1
            for (int e = threadIdx.x; e < R * TILES_PER_ROW; e += GC_THREADS) {
                const int r = e / TILES_PER_ROW, c = e % TILES_PER_ROW;
                if (s_rank[r] >= 0) tile_nnz[((size_t)s_base + s_rank[r]) * TILES_PER_ROW + c] = (unsigned char)s_tile_count[r][c];
            }
        for (int r = 0; r < R; ++r) {
            const int rank = s_rank[r];
            if (rank < 0) continue;
            const size_t dst_row = (size_t)s_base + rank;
            const float4* src = reinterpret_cast<const float4*>(tile + r * NS);
            float4* dst = reinterpret_cast<float4*>(y_out + dst_row * N);
            for (int e = threadIdx.x; e < N / 4; e += GC_THREADS) dst[e] = src[e];
        }
        __syncthreads();  // the tile buffer is reused by the next iteration
    }
}

#ifndef GC_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
// Instances used by the engine: (rows per tile, columns per thread) for n = CPT * GC_THREADS.
#define GC_LAYER_INSTANCE(R, CPT)                                                                                   \
    template __global__ void gc_layer<R, CPT>(const float*, const int*, const int*, const int*, const float*, float*, \
                                              int*, const unsigned long long*, const unsigned long long*, const float*, \
                                              const int*, int*, unsigned long long*, int, int, unsigned char*, int*, int*, float, float);
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
