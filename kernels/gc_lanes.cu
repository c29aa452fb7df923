// Sparse DNN Graph Challenge, lane-major variant: rows are lanes.
//
// Activations live in global memory as tiles of 32 rows, *lane-major*: element (row r of
// tile t, neuron i) is at a[(t * n + i) * 32 + (r % 32)]. A warp computes one output
// neuron j for the 32 rows of a tile at once: every operand load is one 128-byte line
// (conflict-free, coalesced), and the weights of column j are the same for all lanes
// (warp-uniform 16-byte loads of 8 indices at a time).
//
// Per layer, two kernels:
//   gc_lanes_compute  units = (tile, column chunk); the number of chunks per tile is picked
//                     on the device from the live-row count, so that a layer with few live
//                     rows still spreads over every SM. Writes the outputs uncompacted to z
//                     (same tile/lane as the input), adds each row's non-zeros to row_nnz,
//                     and writes the fused monitor: non-zeros per (row, 32-column tile).
//                     The last unit of each tile (a ticket per tile) gives the tile's live
//                     lanes consecutive positions: one atomicAdd on counts[layer + 1].
//   gc_lanes_compact  moves live lanes and their ids to a_out, split over (tile, neuron slice).
// Sizes never leave the device: counts[layer] is read by both kernels.
//
// Weights: padded ELL, column-major: w_idx[j * k + q] (uint16), k a multiple of 8;
// w_val likewise, or null with every weight equal to w_uniform.

#define LANES 32

__device__ __forceinline__ int lanes_chunks(int tiles, int n, int warps_per_block) {
    // enough (tile, chunk) units to give every block of the grid work, but chunks of at
    // least one warp-width of columns per warp
    const int max_chunks = max(1, n / (32 * warps_per_block));
    if (tiles <= 0) return 1;
    const int want = (gridDim.x + tiles - 1) / tiles;
    int chunks = 1;
    while (chunks < want && chunks * 2 <= max_chunks) chunks *= 2;
    return chunks;
}

// When staged is non-zero the block first copies the unit's whole input tile (n x 32
// floats) into dynamic shared memory, so that the 32-fold reuse of every input line is
// served there instead of by L1/L2; otherwise operands are read through L1.
extern "C" __global__ void gc_lanes_compute(const float* __restrict__ a_in, const int* __restrict__ counts, int layer,
                                            const unsigned short* __restrict__ w_idx, const float* __restrict__ w_val,
                                            float w_uniform, int k, int n, float bias, float clamp,
                                            float* __restrict__ z, int* __restrict__ row_nnz,
                                            int* __restrict__ tile_nnz, int staged,
                                            int* __restrict__ tile_ticket, int* __restrict__ tile_base,
                                            unsigned* __restrict__ tile_mask, int* __restrict__ counts_out,
                                            unsigned long long* __restrict__ nnz_out) {
    extern __shared__ float4 s_tile4[];
    __shared__ int s_last;
    const int rows = counts[layer];
    const int tiles = (rows + LANES - 1) / LANES;
    const int warps = blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int chunks = lanes_chunks(tiles, n, warps);
    const int chunk_cols = n / chunks;
    const int units = tiles * chunks;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
        const int t = u / chunks;
        const int c = u - t * chunks;
        const bool valid = t * LANES + lane < rows;
        const float* __restrict__ tile = a_in + (size_t)t * n * LANES + lane;
        if (staged) {
            const float4* src = reinterpret_cast<const float4*>(a_in + (size_t)t * n * LANES);
            __syncthreads();  // the previous unit is done with the shared tile
            for (int e = threadIdx.x; e < n * LANES / 4; e += blockDim.x) s_tile4[e] = __ldg(src + e);
            __syncthreads();
            tile = reinterpret_cast<const float*>(s_tile4) + lane;
        }
        float* __restrict__ out = z + (size_t)t * n * LANES + lane;
        int row_count = 0;
        for (int j0 = c * chunk_cols + warp * 32; j0 < (c + 1) * chunk_cols; j0 += warps * 32) {
            int group_count = 0;
            for (int jj = 0; jj < 32; ++jj) {
                const int j = j0 + jj;
                const unsigned short* idx = w_idx + (size_t)j * k;
                float acc = 0.0f;
                if (w_val == nullptr) {
                    for (int q = 0; q < k; q += 8) {
                        const uint4 packed = __ldg(reinterpret_cast<const uint4*>(idx + q));
                        acc += tile[(packed.x & 0xffff) * LANES] + tile[(packed.x >> 16) * LANES]
                             + tile[(packed.y & 0xffff) * LANES] + tile[(packed.y >> 16) * LANES]
                             + tile[(packed.z & 0xffff) * LANES] + tile[(packed.z >> 16) * LANES]
                             + tile[(packed.w & 0xffff) * LANES] + tile[(packed.w >> 16) * LANES];
                    }
                    acc *= w_uniform;
                } else {
                    const float* val = w_val + (size_t)j * k;
                    for (int q = 0; q < k; q += 8) {
                        const uint4 packed = __ldg(reinterpret_cast<const uint4*>(idx + q));
                        const float4 w0 = __ldg(reinterpret_cast<const float4*>(val + q));
                        const float4 w1 = __ldg(reinterpret_cast<const float4*>(val + q + 4));
                        acc = fmaf(w0.x, tile[(packed.x & 0xffff) * LANES], acc);
                        acc = fmaf(w0.y, tile[(packed.x >> 16) * LANES], acc);
                        acc = fmaf(w0.z, tile[(packed.y & 0xffff) * LANES], acc);
                        acc = fmaf(w0.w, tile[(packed.y >> 16) * LANES], acc);
                        acc = fmaf(w1.x, tile[(packed.z & 0xffff) * LANES], acc);
                        acc = fmaf(w1.y, tile[(packed.z >> 16) * LANES], acc);
                        acc = fmaf(w1.z, tile[(packed.w & 0xffff) * LANES], acc);
                        acc = fmaf(w1.w, tile[(packed.w >> 16) * LANES], acc);
                    }
                }
                const float y = (acc != 0.0f) ? fminf(fmaxf(acc + bias, 0.0f), clamp) : 0.0f;
                out[(size_t)j * LANES] = y;
                group_count += (y != 0.0f);
            }
            if (valid) {
                if (tile_nnz) tile_nnz[(size_t)(t * LANES + lane) * (n / 32) + j0 / 32] = group_count;
                row_count += group_count;
            }
        }
        if (valid && row_count) atomicAdd(&row_nnz[t * LANES + lane], row_count);
        __threadfence();  // this thread's counts are visible before the block takes its ticket
        // The last unit of tile t to finish allocates the tile's output positions.
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            s_last = atomicAdd(&tile_ticket[t], 1) == chunks - 1;
        }
        __syncthreads();
        if (s_last && warp == 0) {
            __threadfence();
            const int row = t * LANES + lane;
            const int count = row < rows ? __ldcg(&row_nnz[row]) : 0;
            const unsigned mask = __ballot_sync(0xffffffffu, count > 0);
            int sum = count;
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                tile_base[t] = mask ? atomicAdd(counts_out, __popc(mask)) : 0;
                tile_mask[t] = mask;
                tile_ticket[t] = 0;
                if (sum) atomicAdd(nnz_out, (unsigned long long)sum);
            }
            if (row < rows) row_nnz[row] = 0;  // ready for the next layer
        }
    }
}

// Moves the live lanes of every tile to their positions (allocated by gc_lanes_compute).
// Units are (tile, slice of neurons), so that even a few tiles spread over the GPU.
extern "C" __global__ void gc_lanes_compact(const float* __restrict__ z, const int* __restrict__ ids_in,
                                            const int* __restrict__ counts, int layer, int n,
                                            const int* __restrict__ tile_base, const unsigned* __restrict__ tile_mask,
                                            float* __restrict__ a_out, int* __restrict__ ids_out) {
    constexpr int SLICE = 64;  // neurons per unit
    const int rows = counts[layer];
    const int tiles = (rows + LANES - 1) / LANES;
    const int slices = n / SLICE;
    const int lane = threadIdx.x & 31;
    const int warps_total = gridDim.x * (blockDim.x / 32);
    for (int u = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); u < tiles * slices; u += warps_total) {
        const int t = u / slices;
        const int slice = u - t * slices;
        const unsigned mask = tile_mask[t];
        if (!((mask >> lane) & 1u)) continue;
        const int position = tile_base[t] + __popc(mask & ((1u << lane) - 1u));
        if (slice == 0) ids_out[position] = ids_in[t * LANES + lane];
        const float* src = z + ((size_t)t * n + slice * SLICE) * LANES + lane;
        float* dst = a_out + ((size_t)(position / LANES) * n + slice * SLICE) * LANES + position % LANES;
        float v[SLICE];
#pragma unroll
        for (int i = 0; i < SLICE; ++i) v[i] = __ldcs(src + (size_t)i * LANES);
#pragma unroll
        for (int i = 0; i < SLICE; ++i) dst[(size_t)i * LANES] = v[i];
    }
}

// Layer 1's input: CSR rows -> lane-major tiles (a must be zeroed first). One warp a row.
extern "C" __global__ void gc_lanes_from_csr(const int* __restrict__ ptr, const int* __restrict__ idx,
                                             const float* __restrict__ val, int rows, int n,
                                             float* __restrict__ a, int* __restrict__ ids) {
    const int lane = threadIdx.x & 31;
    const int warps_total = gridDim.x * (blockDim.x / 32);
    for (int row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); row < rows; row += warps_total) {
        float* dst = a + ((size_t)(row / LANES) * n) * LANES + row % LANES;
        for (int e = ptr[row] + lane; e < ptr[row + 1]; e += 32) dst[(size_t)idx[e] * LANES] = val[e];
        if (lane == 0) ids[row] = row;
    }
}
