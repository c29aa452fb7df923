// Spartan machinery for dense-weight layers: the layer epilogue with a fused sparsity
// monitor, the separate counting pass it replaces, and the scatter steps of compaction.
// Compiled at run time by CuPy (RawModule, name expressions for the template instances).
//
// Epilogue: y[r, c] = min(clamp, max(0, z[r, c] + bias[c])), row-major [M x N], N % 4 == 0.
// A block of 256 threads (8 warps) covers EPI_ROWS = 128 rows x 128 columns: lane l of a
// warp owns the float4 at columns 4l .. 4l + 3 of the block's 128, warp w the 16 rows
// 16w .. 16w + 15. A warp issues its 16 loads before anything else, so a block lives about
// one memory round trip (grids of a few hundred blocks are latency-bound otherwise); it then
// finishes its rows. Twelve of the 16 loads go to shared memory (cp.async, 48 KiB a block,
// EPILOGUE_SHARED_BYTES), four to registers: all 16 in registers took 64 of each thread's,
// and with the monitor's the fused kernel needed 90 and fitted 2 blocks per SM where the
// plain one fitted 3 (VGG-16 conv5_2's 392 blocks then took 1.5 waves fused, 1 plain). As
// split, every mode takes 38-46 registers and fits 4 blocks per SM (all 16 staged: 3, by
// shared memory, and a larger monitor cost on AlexNet conv2; docs/performance-notes.md).
//
// The monitor adds little to that loop: a lane keeps its own non-zeros of rows 4q .. 4q + 3
// as the four bytes of packed[q] (at most 4 each). After the loop, four warp reductions of
// the packed words give all 16 row totals (at most 128 a byte), and a tile's lane total is a
// byte sum of its rows (dp4a), reduced over the tile's lanes by shuffles. Tiles taller than
// 16 rows span warps: each warp leaves its share in shared memory for one sum after a barrier.
//
// Monitor output (written, never accumulated, so nothing has to be zeroed first):
//   tile_nnz[tr * tiles_n + tc]  non-zeros of the TR x TC tile (tr, tc); TR and TC are
//                                powers of two, TR <= 128 and 4 <= TC <= 128.
//   row_part[r * chunks + b]     non-zeros of row r in the b-th 128-column chunk
//                                (chunks = ceil(N / 128)); a row is live when any is > 0.
// Each tile and each (row, chunk) lies inside exactly one block, so the block owns it.
//
// MODE 0: plain epilogue. MODE 1: epilogue + monitor (fused). MODE 2: count only: reads
// y = z as it is (no bias, no store), the separate pass of a software monitor.

#define EPI_ROWS 128
#define EPI_COLS 128
#define EPI_WARPS 8
#define EPI_STAGED_ROWS 12  // of a warp's 16 rows, those whose loads go to shared memory; the rest to registers
#define EPILOGUE_SHARED_BYTES (EPI_WARPS * EPI_STAGED_ROWS * EPI_COLS * 4)  // dynamic shared memory of a launch

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80
// on; a plain copy before); cp_async_wait_all: this thread's copies have landed.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
#if __CUDA_ARCH__ >= 800
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src) : "memory");
#else
    *reinterpret_cast<float4*>(shared_dst) = *reinterpret_cast<const float4*>(global_src);
#endif
}

__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// 0x01 in bytes lo .. hi - 1 of a word (0 <= lo < hi <= 4)
__device__ __forceinline__ unsigned byte_ones(int lo, int hi) {
    return (0x01010101u >> (8 * (4 - (hi - lo)))) << (8 * lo);
}

// The monitor's counts from each lane's packed row counts (see the header; rows past M and
// columns past N were never counted). TR, TC: powers of two.
__device__ __forceinline__ void epilogue_counts(const unsigned (&packed)[4], int warp_rows, int M, int N, int TR,
                                                int TC, int* __restrict__ tile_nnz, int* __restrict__ row_part,
                                                int* __restrict__ s_share) {
    constexpr int ROWS_PER_WARP = EPI_ROWS / EPI_WARPS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.y * EPI_ROWS, warp_row0 = row0 + warp * ROWS_PER_WARP;
    // row totals: byte j of the reduced packed[q] is row 4q + j's
    unsigned rows_total[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) rows_total[q] = __reduce_add_sync(0xffffffffu, packed[q]);
    if (lane < warp_rows) {
        const unsigned word = lane < 8 ? (lane < 4 ? rows_total[0] : rows_total[1]) : (lane < 12 ? rows_total[2] : rows_total[3]);
        const int chunks = (N + EPI_COLS - 1) / EPI_COLS;
        row_part[(size_t)(warp_row0 + lane) * chunks + blockIdx.x] = (word >> (8 * (lane & 3))) & 0xffu;
    }

    // tiles: a lane's share is a byte sum, the tile's a sum over its TC / 4 lanes
    const int tr_shift = __ffs(TR) - 1, group = TC / 4, group_shift = __ffs(group) - 1;  // lanes per tile column: group
    const int block_tiles_n = EPI_COLS / TC;
    const int tiles_n = (N + TC - 1) / TC, tiles_m = (M + TR - 1) / TR;
    const int tc = blockIdx.x * block_tiles_n + (lane >> group_shift);
    const bool leader = (lane & (group - 1)) == 0;
    const int rows_per_tile = min(TR, ROWS_PER_WARP);  // of this warp's rows
    for (int t0 = 0; t0 < ROWS_PER_WARP; t0 += rows_per_tile) {
        unsigned share = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int lo = max(t0 - 4 * q, 0), hi = min(t0 + rows_per_tile - 4 * q, 4);
            if (lo < hi) share = __dp4a(packed[q], byte_ones(lo, hi), share);
        }
        for (int o = group >> 1; o > 0; o >>= 1) share += __shfl_down_sync(0xffffffffu, share, o, group);
        if (TR > ROWS_PER_WARP) {
            if (leader) s_share[warp * (EPI_COLS / 4) + (lane >> group_shift)] = share;
        } else {
            const int tr = (warp_row0 + t0) >> tr_shift;
            if (leader && tr < tiles_m && tc < tiles_n) tile_nnz[(size_t)tr * tiles_n + tc] = share;
        }
    }
    if (TR <= ROWS_PER_WARP) return;  // (uniform across the block)
    __syncthreads();
    const int warps_per_tile = min(TR, EPI_ROWS) / ROWS_PER_WARP;
    for (int e = threadIdx.x; e < (EPI_WARPS / warps_per_tile) * block_tiles_n; e += blockDim.x) {
        const int first_warp = (e / block_tiles_n) * warps_per_tile, c = e % block_tiles_n;
        int total = 0;
        for (int w = 0; w < warps_per_tile; ++w) total += s_share[(first_warp + w) * (EPI_COLS / 4) + c];
        const int tr = (row0 + first_warp * ROWS_PER_WARP) >> tr_shift, tcol = blockIdx.x * block_tiles_n + c;
        if (tr < tiles_m && tcol < tiles_n) tile_nnz[(size_t)tr * tiles_n + tcol] = total;
    }
}

template <int MODE>
__global__ void __launch_bounds__(256) epilogue(const float* __restrict__ z, const float* __restrict__ bias,
                                                float* __restrict__ y, int M, int N, float clamp, int TR, int TC,
                                                int* __restrict__ tile_nnz, int* __restrict__ row_part) {
    constexpr bool COUNT = MODE != 0;
    constexpr int ROWS_PER_WARP = EPI_ROWS / EPI_WARPS;  // 16 consecutive rows per warp
    __shared__ int s_share[COUNT ? EPI_WARPS * (EPI_COLS / 4) : 1];  // [warp][tile column], tiles of TR > 16
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = blockIdx.x * EPI_COLS + lane * 4;
    const int row0 = blockIdx.y * EPI_ROWS, warp_row0 = row0 + warp * ROWS_PER_WARP;
    const int warp_rows = max(0, min(ROWS_PER_WARP, M - warp_row0));  // the warp's rows inside the matrix
    const int rows_here = col < N ? warp_rows : 0;                      // this lane's valid rows

    // every load first (independent, so all 16 are in flight at once): the first STAGED rows
    // into the lane's own slots in shared memory (a lane reads back only what it copied, so
    // no barrier is needed), the others into registers
    constexpr int STAGED = EPI_STAGED_ROWS, HELD = ROWS_PER_WARP - STAGED;
    extern __shared__ __align__(16) float4 s_z[];  // [warp][row step][lane]
    float4* stage = s_z + warp * STAGED * 32 + lane;
    float4 held[HELD > 0 ? HELD : 1];
#pragma unroll
    for (int step = 0; step < ROWS_PER_WARP; ++step) {
        const float* src = z + (size_t)(warp_row0 + step) * N + col;
        if (step < STAGED) {
            if (step < rows_here) cp_async_16(&stage[step * 32], src);
        } else {
            held[step - STAGED] = step < rows_here ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (MODE != 2 && bias && rows_here) b = *reinterpret_cast<const float4*>(bias + col);
    // then row by row: bias, ReLU, clamp, store, count (a wait per staged row compiled to one
    // wait for all on sm_90: the copies arrive close together)
    cp_async_wait_all();
    unsigned packed[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int step = 0; step < ROWS_PER_WARP; ++step) {
        if (step >= rows_here) break;
        float4 x = step < STAGED ? stage[step * 32] : held[step - STAGED];
        if (MODE != 2) {
            x.x = fminf(clamp, fmaxf(0.f, x.x + b.x));
            x.y = fminf(clamp, fmaxf(0.f, x.y + b.y));
            x.z = fminf(clamp, fmaxf(0.f, x.z + b.z));
            x.w = fminf(clamp, fmaxf(0.f, x.w + b.w));
            *reinterpret_cast<float4*>(y + (size_t)(warp_row0 + step) * N + col) = x;
        }
        if (COUNT)
            packed[step / 4] += (unsigned)((x.x != 0.f) + (x.y != 0.f) + (x.z != 0.f) + (x.w != 0.f)) << (8 * (step % 4));
    }
    if constexpr (COUNT) epilogue_counts(packed, warp_rows, M, N, TR, TC, tile_nnz, row_part, s_share);
}

__device__ __forceinline__ int warp_sum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Live rows of an M-row matrix in three launches and no host round trip (the caller knows
// how many rows are live from the monitor's scalars, or reads the sum of block_live).
// Both listing kernels take a row per thread, blocks of up to 1024 threads (a multiple of 32).
// count_live_rows: block_live[b] = rows with counts[r] > 0 among block b's rows.
// list_live_rows: block b adds the blocks before it and writes the ids of its live rows in
// order (ids[p] = r). move_rows: packed row p = row ids[p] of a (one block per live row;
// VEC4 when N is a multiple of 4, the rows then 16-byte aligned); SCATTER writes the other
// way, row ids[p] of a = packed row p (the expansion, into a zeroed matrix).
__global__ void __launch_bounds__(1024) count_live_rows(const int* __restrict__ counts, int M, int* __restrict__ block_live) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    const int live = __syncthreads_count(r < M && counts[r] > 0);
    if (threadIdx.x == 0) block_live[blockIdx.x] = live;
}

__global__ void __launch_bounds__(1024) list_live_rows(const int* __restrict__ counts, int M,
                                                       const int* __restrict__ block_live, int* __restrict__ ids) {
    __shared__ int partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int before = 0;
    for (int b = threadIdx.x; b < (int)blockIdx.x; b += blockDim.x) before += block_live[b];
    before = warp_sum(before);
    if (lane == 0) partial[warp] = before;
    __syncthreads();
    before = 0;
    for (int w = 0; w < warps; ++w) before += partial[w];  // every thread: the rows listed before this block
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = r < M && counts[r] > 0;
    const unsigned int mask = __ballot_sync(0xffffffffu, live);
    __syncthreads();  // partial is reused for the warps' live counts
    if (lane == 0) partial[warp] = __popc(mask);
    __syncthreads();
    int offset = before;
    for (int w = 0; w < warp; ++w) offset += partial[w];
    if (live) ids[offset + __popc(mask & ((1u << lane) - 1u))] = r;
}

template <bool VEC4, bool SCATTER>
__global__ void move_rows(float* __restrict__ a, const int* __restrict__ ids, float* __restrict__ packed, int N) {
    const size_t row = (size_t)ids[blockIdx.x] * N, slot = (size_t)blockIdx.x * N;
    float* to = SCATTER ? a + row : packed + slot;
    const float* from = SCATTER ? packed + slot : a + row;
    if (VEC4) {
        for (int c = threadIdx.x; c < N / 4; c += blockDim.x)
            reinterpret_cast<float4*>(to)[c] = reinterpret_cast<const float4*>(from)[c];
    } else {
        for (int c = threadIdx.x; c < N; c += blockDim.x) to[c] = from[c];
    }
}

// Packed tile data: data[p, i, j] = a[tr * TR + i, tc * TC + j] (zero outside the matrix),
// one block per listed tile. UNPACK = true writes the other way (into a zeroed matrix).
template <bool UNPACK>
__global__ void move_tiles(float* __restrict__ a, const int* __restrict__ coords, float* __restrict__ data, int M, int N,
                           int TR, int TC) {
    const int p = blockIdx.x;
    const int r0 = coords[2 * p] * TR, c0 = coords[2 * p + 1] * TC;
    for (int e = threadIdx.x; e < TR * TC; e += blockDim.x) {
        const int r = r0 + e / TC, c = c0 + e % TC;
        const bool inside = r < M && c < N;
        if (UNPACK) {
            if (inside) a[(size_t)r * N + c] = data[(size_t)p * TR * TC + e];
        } else {
            data[(size_t)p * TR * TC + e] = inside ? a[(size_t)r * N + c] : 0.f;
        }
    }
}

// The non-zero tiles of a tiles_m x tiles_n count matrix as a list, in two launches and no
// host round trip. count_tile_rows: row_count[r] = non-zero tiles in tile row r (a warp per
// row). list_tile_rows: a block per 32 tile rows finds the tiles listed before its rows (a sum
// over row_count), scans its 32 rows' counts, and each warp writes its row: coords[p] =
// (tile row, tile col), col_index[p] = tile col, row_ptr[r] = tiles before row r,
// row_ptr[tiles_m] = all of them. Launch list_tile_rows with max(1, ceil(tiles_m / 32))
// blocks of 1024 threads. The output buffers hold tiles_m * tiles_n entries.

__global__ void count_tile_rows(const int* __restrict__ counts, int tiles_m, int tiles_n, int* __restrict__ row_count) {
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    for (int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < tiles_m; r += warps) {
        int n = 0;
        for (int c = lane; c < tiles_n; c += 32) n += counts[(size_t)r * tiles_n + c] > 0;
        n = warp_sum(n);
        if (lane == 0) row_count[r] = n;
    }
}

__global__ void __launch_bounds__(1024) list_tile_rows(const int* __restrict__ counts, const int* __restrict__ row_count,
                                                       int tiles_m, int tiles_n, int* __restrict__ row_ptr,
                                                       int* __restrict__ coords, int* __restrict__ col_index) {
    __shared__ int partial[32];
    __shared__ int offsets[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int first = blockIdx.x * 32;
    int before = 0;
    for (int r = threadIdx.x; r < first && r < tiles_m; r += blockDim.x) before += row_count[r];
    before = warp_sum(before);
    if (lane == 0) partial[warp] = before;
    __syncthreads();
    if (warp == 0) {
        const int all_before = warp_sum(lane < (int)(blockDim.x >> 5) ? partial[lane] : 0);
        const int mine = first + lane < tiles_m ? row_count[first + lane] : 0;
        int scan = mine;  // inclusive scan over the block's 32 rows
        for (int o = 1; o < 32; o <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, scan, o);
            if (lane >= o) scan += up;
        }
        offsets[lane] = all_before + scan - mine;
        if (first + lane == tiles_m - 1) row_ptr[tiles_m] = all_before + scan;
    }
    __syncthreads();
    const int r = first + warp;
    if (tiles_m == 0 && threadIdx.x == 0) row_ptr[0] = 0;
    if (r >= tiles_m) return;
    int pos = offsets[warp];
    if (lane == 0) row_ptr[r] = pos;
    for (int c0 = 0; c0 < tiles_n; c0 += 32) {
        const int c = c0 + lane;
        const bool active = c < tiles_n && counts[(size_t)r * tiles_n + c] > 0;
        const unsigned int mask = __ballot_sync(0xffffffffu, active);
        if (active) {
            const int p = pos + __popc(mask & ((1u << lane) - 1u));
            coords[2 * p] = r;
            coords[2 * p + 1] = c;
            col_index[p] = c;
        }
        pos += __popc(mask);
    }
}

// The profile's scalars in one pass: out[0] += non-zeros, out[1] += non-zero tiles,
// out[2] += live rows (rows whose partial counts over `chunks` column chunks sum above 0).
// out must be zeroed.
__global__ void profile_scalars(const int* __restrict__ tile_nnz, int tiles, const int* __restrict__ row_counts, int rows,
                                int chunks, unsigned long long* __restrict__ out) {
    unsigned long long nnz = 0, active = 0, live = 0;
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < tiles; i += stride) {
        const int v = tile_nnz[i];
        nnz += v;
        active += v > 0;
    }
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        int s = 0;
        for (int c = 0; c < chunks; ++c) s += row_counts[(size_t)r * chunks + c];
        live += s > 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
        nnz += __shfl_down_sync(0xffffffffu, nnz, o);
        active += __shfl_down_sync(0xffffffffu, active, o);
        live += __shfl_down_sync(0xffffffffu, live, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (nnz) atomicAdd(out, nnz);
        if (active) atomicAdd(out + 1, active);
        if (live) atomicAdd(out + 2, live);
    }
}

#ifndef SPARTAN_TILES_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define EPILOGUE_INSTANCE(MODE) \
    template __global__ void epilogue<MODE>(const float*, const float*, float*, int, int, float, int, int, int*, int*);
EPILOGUE_INSTANCE(0)
EPILOGUE_INSTANCE(1)
EPILOGUE_INSTANCE(2)
template __global__ void move_rows<false, false>(float*, const int*, float*, int);
template __global__ void move_rows<true, false>(float*, const int*, float*, int);
template __global__ void move_rows<false, true>(float*, const int*, float*, int);
template __global__ void move_rows<true, true>(float*, const int*, float*, int);
template __global__ void move_tiles<false>(float*, const int*, float*, int, int, int, int);
template __global__ void move_tiles<true>(float*, const int*, float*, int, int, int, int);
#endif
