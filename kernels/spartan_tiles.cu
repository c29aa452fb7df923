// Spartan machinery for dense-weight layers: the layer epilogue with a fused sparsity
// monitor, the separate counting pass it replaces, and the scatter steps of compaction.
// Compiled at run time by CuPy (RawModule, name expressions for the template instances).
//
// Epilogue: y[r, c] = min(clamp, max(0, z[r, c] + bias[c])), row-major [M x N], N % 4 == 0.
// A block of 256 threads (8 warps) covers EPI_ROWS = 128 rows x 128 columns: lane l of a
// warp owns the float4 at columns 4l .. 4l + 3 of the block's 128, warp w the 16 rows
// 16w .. 16w + 15. A warp issues its 16 loads before anything else, so a block lives about
// one memory round trip (grids of a few hundred blocks are latency-bound otherwise); it then
// finishes each row as its load arrives, so the monitor's arithmetic on early rows overlaps
// the wait for later ones. A row's total is one warp reduction (redux.sync, sm_80+); a tile's is
// summed in registers over the warp's rows of it and reduced once; only tiles taller than
// 16 rows meet in shared memory.
//
// Monitor output (written, never accumulated, so nothing has to be zeroed first):
//   tile_nnz[tr * tiles_n + tc]  non-zeros of the TR x TC tile (tr, tc); TR divides 128,
//                                TC divides 128 and is a multiple of 4 (powers of two).
//   row_part[r * chunks + b]     non-zeros of row r in the b-th 128-column chunk
//                                (chunks = ceil(N / 128)); a row is live when any is > 0.
// Each tile and each (row, chunk) lies inside exactly one block, so the block owns it.
// Tiles of TR <= 16 rows lie inside one warp's rows, and that warp writes them.
//
// MODE 0: plain epilogue. MODE 1: epilogue + monitor (fused). MODE 2: count only: reads
// y = z as it is (no bias, no store), the separate pass of a software monitor.

#define EPI_ROWS 128
#define EPI_COLS 128
#define EPI_WARPS 8

template <int MODE>
__global__ void __launch_bounds__(256) epilogue(const float* __restrict__ z, const float* __restrict__ bias,
                                                float* __restrict__ y, int M, int N, float clamp, int TR, int TC,
                                                int* __restrict__ tile_nnz, int* __restrict__ row_part) {
    constexpr bool COUNT = MODE != 0;
    constexpr int ROWS_PER_WARP = EPI_ROWS / EPI_WARPS;  // 16 consecutive rows per warp
    __shared__ int s_tile[(MODE != 0) ? (EPI_ROWS / 32) * (EPI_COLS / 4) : 1];  // only for TR >= 32
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = blockIdx.x * EPI_COLS + lane * 4;
    const int row0 = blockIdx.y * EPI_ROWS, warp_row0 = row0 + warp * ROWS_PER_WARP;
    const bool active = col < N;
    const int rows_here = active ? min(ROWS_PER_WARP, M - warp_row0) : 0;  // this lane's valid rows
    const int group = TC / 4;  // lanes per tile column (1 .. 32)
    const int block_tiles_n = EPI_COLS / TC;
    const int chunks = (N + EPI_COLS - 1) / EPI_COLS;
    const int tiles_n = (N + TC - 1) / TC, tiles_m = (M + TR - 1) / TR;
    const bool shared_tiles = TR > ROWS_PER_WARP;  // a tile spans several warps
    if (COUNT && shared_tiles) {
        for (int e = threadIdx.x; e < (EPI_ROWS / TR) * block_tiles_n; e += blockDim.x) s_tile[e] = 0;
        __syncthreads();
    }

    // every load first (independent, so all 16 are in flight at once)
    float4 v[ROWS_PER_WARP];
#pragma unroll
    for (int step = 0; step < ROWS_PER_WARP; ++step)
        v[step] = step < rows_here ? *reinterpret_cast<const float4*>(z + (size_t)(warp_row0 + step) * N + col)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (MODE != 2 && bias && active) b = *reinterpret_cast<const float4*>(bias + col);
    // then row by row as the loads arrive: bias, ReLU, clamp, store, count
    int tile_sum = 0, my_row_sum = 0;
#pragma unroll
    for (int step = 0; step < ROWS_PER_WARP; ++step) {
        float4 x = v[step];
        if (MODE != 2) {
            x.x = fminf(clamp, fmaxf(0.f, x.x + b.x));
            x.y = fminf(clamp, fmaxf(0.f, x.y + b.y));
            x.z = fminf(clamp, fmaxf(0.f, x.z + b.z));
            x.w = fminf(clamp, fmaxf(0.f, x.w + b.w));
            if (step < rows_here) *reinterpret_cast<float4*>(y + (size_t)(warp_row0 + step) * N + col) = x;
        }
        if (COUNT) {  // rows past M and columns past N count nothing (their x may hold the bias)
            const int nz = step < rows_here ? (x.x != 0.f) + (x.y != 0.f) + (x.z != 0.f) + (x.w != 0.f) : 0;
            const int row_sum = __reduce_add_sync(0xffffffffu, nz);
            if (lane == step) my_row_sum = row_sum;
            tile_sum += nz;
            if (!shared_tiles && (step + 1) % TR == 0) {  // a whole tile row of this warp's: the warp owns it
                int t = tile_sum;
                for (int o = group >> 1; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o, group);
                const int tr = (warp_row0 + step) / TR, tc = blockIdx.x * block_tiles_n + lane / group;
                if ((lane % group) == 0 && tr < tiles_m && tc < tiles_n) tile_nnz[(size_t)tr * tiles_n + tc] = t;
                tile_sum = 0;
            }
        }
    }
    if (!COUNT) return;
    if (lane < ROWS_PER_WARP && warp_row0 + lane < M) row_part[(size_t)(warp_row0 + lane) * chunks + blockIdx.x] = my_row_sum;
    if (!shared_tiles) return;  // every tile row was written in the loop (TR divides 16)
    int t = tile_sum;  // this warp's 16 rows lie in one tile row
    for (int o = group >> 1; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o, group);
    if (t && (lane % group) == 0) atomicAdd(&s_tile[(warp * ROWS_PER_WARP / TR) * block_tiles_n + lane / group], t);
    __syncthreads();
    for (int e = threadIdx.x; e < (EPI_ROWS / TR) * block_tiles_n; e += blockDim.x) {
        const int tr = row0 / TR + e / block_tiles_n, tc = blockIdx.x * block_tiles_n + e % block_tiles_n;
        if (tr < tiles_m && tc < tiles_n) tile_nnz[(size_t)tr * tiles_n + tc] = s_tile[e];
    }
}

// Compaction scatter of live rows: rows with keep[r] != 0 go to position pos[r] (an
// exclusive scan of keep). One block per row.
__global__ void scatter_rows(const float* __restrict__ a, const int* __restrict__ keep, const int* __restrict__ pos,
                             float* __restrict__ packed, int* __restrict__ ids, int N) {
    const int r = blockIdx.x;
    if (!keep[r]) return;
    const int p = pos[r];
    if (threadIdx.x == 0) ids[p] = r;
    for (int c = threadIdx.x; c < N; c += blockDim.x) packed[(size_t)p * N + c] = a[(size_t)r * N + c];
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
__device__ __forceinline__ int warp_sum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

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
template __global__ void move_tiles<false>(float*, const int*, float*, int, int, int, int);
template __global__ void move_tiles<true>(float*, const int*, float*, int, int, int, int);
#endif
