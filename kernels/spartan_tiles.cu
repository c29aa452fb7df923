// Spartan machinery for dense-weight layers: the layer epilogue with a fused sparsity
// monitor, the separate counting pass it replaces, and the scatter steps of compaction.
// Compiled at run time by CuPy (RawModule, name expressions for the template instances).
//
// Epilogue: y[r, c] = min(clamp, max(0, z[r, c] + bias[c])), row-major [M x N], N % 4 == 0.
// A block of 256 threads (8 warps) covers EPI_ROWS = 128 rows x 128 columns: lane l of a
// warp owns the float4 at columns 4l .. 4l + 3 of the block's 128, warp w the 16 rows
// 16w .. 16w + 15. Counting is kept off the memory path: a row's total is one warp
// reduction (redux.sync, sm_80+); a tile's is summed in registers over the warp's rows of it
// and reduced once; only tiles taller than 16 rows meet in shared memory.
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
    const int group = TC / 4;  // lanes per tile column (1 .. 32)
    const int block_tiles_n = EPI_COLS / TC;
    const int chunks = (N + EPI_COLS - 1) / EPI_COLS;
    const int tiles_n = (N + TC - 1) / TC, tiles_m = (M + TR - 1) / TR;
    const bool shared_tiles = TR > ROWS_PER_WARP;  // a tile spans several warps
    if (COUNT && shared_tiles) {
        for (int e = threadIdx.x; e < (EPI_ROWS / TR) * block_tiles_n; e += blockDim.x) s_tile[e] = 0;
        __syncthreads();
    }
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (MODE != 2 && bias && active) b = *reinterpret_cast<const float4*>(bias + col);
    int tile_sum = 0, my_row_sum = 0;
#pragma unroll 4
    for (int step = 0; step < ROWS_PER_WARP; ++step) {
        const int r = warp_row0 + step;
        int nz = 0;
        if (active && r < M) {
            float4 v = *reinterpret_cast<const float4*>(z + (size_t)r * N + col);
            if (MODE != 2) {
                v.x = fminf(clamp, fmaxf(0.f, v.x + b.x));
                v.y = fminf(clamp, fmaxf(0.f, v.y + b.y));
                v.z = fminf(clamp, fmaxf(0.f, v.z + b.z));
                v.w = fminf(clamp, fmaxf(0.f, v.w + b.w));
                *reinterpret_cast<float4*>(y + (size_t)r * N + col) = v;
            }
            nz = (v.x != 0.f) + (v.y != 0.f) + (v.z != 0.f) + (v.w != 0.f);
        }
        if (COUNT) {
            const int row_sum = __reduce_add_sync(0xffffffffu, nz);
            if (lane == step) my_row_sum = row_sum;
            tile_sum += nz;
            if (!shared_tiles && (step + 1) % TR == 0) {  // a whole tile row of this warp's: the warp owns it
                int t = tile_sum;
                for (int o = group >> 1; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o, group);
                const int tr = r / TR, tc = blockIdx.x * block_tiles_n + lane / group;
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

// Lists the non-zero tiles of a tiles_m x tiles_n count matrix, given `inclusive`, the
// inclusive prefix sum of (counts > 0) in row-major order (a device scan; no host round
// trip). Writes coords[p] = (tile row, tile col) and col_index[p] = tile col for the p-th
// listed tile, row_ptr[r] = tiles listed before tile row r and row_ptr[tiles_m] = all of them.
// Any grid; the output buffers hold tiles_m * tiles_n entries.
__global__ void scatter_tiles(const int* __restrict__ counts, const int* __restrict__ inclusive, int tiles_m,
                              int tiles_n, int* __restrict__ row_ptr, int* __restrict__ coords,
                              int* __restrict__ col_index) {
    const int total = tiles_m * tiles_n;
    if (total == 0) {
        if (blockIdx.x == 0 && threadIdx.x == 0) row_ptr[tiles_m] = 0;
        return;
    }
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
        const int r = t / tiles_n, c = t - r * tiles_n;
        const int active = counts[t] > 0;
        const int pos = inclusive[t] - active;
        if (c == 0) row_ptr[r] = pos;
        if (active) {
            coords[2 * pos] = r;
            coords[2 * pos + 1] = c;
            col_index[pos] = c;
        }
        if (t == total - 1) row_ptr[tiles_m] = inclusive[t];
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
