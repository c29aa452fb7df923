// The merged network's later launches with a warp per group of rows (spartan_py/engines/gpu_merged.py,
// "chain" launches): each warp carries its rows through all of the launch's layers on its
// own, with no block barrier between layers. Same layer semantics, sums in the same order,
// compaction, counters and fused monitor as gc_merged in kernels/gc_merged.cu, whose launches
// stage each layer into a block-wide buffer between two barriers; here a launch stages all of
// its layers' indices once, as bytes. Compiled at run time by CuPy and, in CI, by nvcc for
// sm_80 and sm_90.
//
// Layout (as in gc_merged.cu unless said)
//   chain_ptrs[l]: layer l's stage (a device pointer as a 64-bit integer), k4_l x width_l
//                 index words, then k8_l x width_l weight-code words, then 16 floats:
//                 index word [s4][h] holds the inputs of steps 4 s4 .. 4 s4 + 3 of column h,
//                 a byte each, low byte first; code word [s8][h] the weights of steps
//                 8 s8 .. 8 s8 + 7, four bits each (an entry of the 16 floats). Steps past the
//                 layer's own are padding, reading the zero column width_{l-1} (so every index
//                 is below 256). k8_l = 0: every weight is w_uniforms[l] (no codes).
//   k4s[l], k8s[l]: the index and code words a column of layer l takes.
//   y_in, y_out : live rows of Z, row stride `stride` floats; counts[layer] rows come in.
//   a launch runs only layers of width at most 32 C.
//
// Work split: a warp takes G rows (rows past the end are zero); lane j computes columns j,
// j + 32, ... (C of them) of each. Warps take groups block by block in turn, so that few rows
// spread over every SM. A column's indices at one step fall in distinct banks for the 32
// lanes (the plan's order, kernels/gc_merged.cu), so a step's operand reads do not conflict.

#ifndef CH_THREADS
#define CH_THREADS 1024
#endif
#define CH_PAD 32
#define CH_MAX_LAYERS 32  // layers a launch may take (MAX_LAUNCH_LAYERS in layer_plan.py)

// count words from global src to shared dst by every thread of the block, 16 bytes at a time
// when both are aligned
__device__ __forceinline__ void ch_copy_words(int* __restrict__ dst, const int* __restrict__ src, int count) {
    if (((reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(dst)) & 15) == 0 && (count & 3) == 0) {
        const int4* s4 = reinterpret_cast<const int4*>(src);
        int4* d4 = reinterpret_cast<int4*>(dst);
        for (int e = threadIdx.x; e < count / 4; e += CH_THREADS) d4[e] = __ldg(s4 + e);
        return;
    }
    for (int e = threadIdx.x; e < count; e += CH_THREADS) dst[e] = __ldg(src + e);
}

// Four steps of the sums of G rows x C columns: step q's input of column c is byte q of
// word[c], its weight entry (CODED) nibble q of code[c] >> shift, else w_uniform.
template <int C, int G, bool CODED>
__device__ __forceinline__ void ch_quad(float (&acc)[G][C], const int (&word)[C], const int (&code)[C], int shift,
                                        const float* __restrict__ in, int S, const float* __restrict__ table,
                                        float w_uniform) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int i = (word[c] >> (8 * q)) & 0xff;
            const float w = CODED ? table[(code[c] >> (shift + 4 * q)) & 15] : w_uniform;
#pragma unroll
            for (int g = 0; g < G; ++g) acc[g][c] = fmaf(w, in[g * S + i], acc[g][c]);
        }
}

// A layer's sums: k4 index words a column from `words`, and, when CODED, k8 code words from
// `codes` into the weights of `table`; columns 32 c past `width` are not computed.
template <int C, int G, bool CODED>
__device__ __forceinline__ void ch_sums(float (&acc)[G][C], const int* __restrict__ words, const int* __restrict__ codes,
                                        const float* __restrict__ table, int k4, int width, const float* __restrict__ in,
                                        int S, float w_uniform) {
    const int lane = threadIdx.x & 31;
    int word[C], code[C];
#pragma unroll
    for (int c = 0; c < C; ++c) code[c] = 0;
    int s4 = 0;
    for (; s4 + 1 < k4; s4 += 2) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (CODED) code[c] = 32 * c < width ? codes[(s4 >> 1) * width + lane + 32 * c] : 0;
            word[c] = 32 * c < width ? words[s4 * width + lane + 32 * c] : 0;
        }
        ch_quad<C, G, CODED>(acc, word, code, 0, in, S, table, w_uniform);
#pragma unroll
        for (int c = 0; c < C; ++c) word[c] = 32 * c < width ? words[(s4 + 1) * width + lane + 32 * c] : 0;
        ch_quad<C, G, CODED>(acc, word, code, 16, in, S, table, w_uniform);
    }
    if (s4 < k4) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (CODED) code[c] = 32 * c < width ? codes[(s4 >> 1) * width + lane + 32 * c] : 0;
            word[c] = 32 * c < width ? words[s4 * width + lane + 32 * c] : 0;
        }
        ch_quad<C, G, CODED>(acc, word, code, 0, in, S, table, w_uniform);
    }
}

template <int C, int G>
__global__ void __launch_bounds__(CH_THREADS, 1)
gc_chain(const float* __restrict__ y_in, const int* __restrict__ ids_in, float* __restrict__ y_out, int* __restrict__ ids_out,
         const unsigned long long* __restrict__ chain_ptrs, const int* __restrict__ k4s, const int* __restrict__ k8s,
         const float* __restrict__ w_uniforms,
         const int* __restrict__ widths, const unsigned long long* __restrict__ size_ptrs,
         const unsigned long long* __restrict__ group_ptrs, int* __restrict__ counts,
         unsigned long long* __restrict__ nnz_counts, int layer, int layer_count, unsigned char* __restrict__ tile_nnz,
         int* __restrict__ row_nnz, int* __restrict__ row_layers, const unsigned long long* __restrict__ mask_ptrs,
         const int* __restrict__ mask_levels, int n, int stride, float bias, float clamp) {
    extern __shared__ int4 smem4[];
    int* const smem = reinterpret_cast<int*>(smem4);
    __shared__ int s_offset[CH_MAX_LAYERS + 1];  // word offset of each layer in the stage
    __shared__ int s_live[CH_MAX_LAYERS];        // per layer, rows of this block live after it
    __shared__ unsigned long long s_nnz[CH_MAX_LAYERS];
    __shared__ int s_groups[CH_MAX_LAYERS];  // groups of this block that ran the layer
    constexpr int WARPS = CH_THREADS / 32;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int rows = counts[layer];
    const int group_count = (rows + G - 1) / G;
    if (blockIdx.x >= group_count) return;  // (uniform across the block) nothing to do here

    if (threadIdx.x == 0) {
        int offset = 0;
        for (int j = 0; j < layer_count; ++j) {
            s_offset[j] = offset;
            offset += (k4s[layer + j] + k8s[layer + j]) * widths[layer + j] + 16;
        }
        s_offset[layer_count] = offset;
    }
    if (threadIdx.x < layer_count) {
        s_live[threadIdx.x] = 0;
        s_nnz[threadIdx.x] = 0ull;
        s_groups[threadIdx.x] = 0;
    }
    __syncthreads();
    const int total_words = s_offset[layer_count];
    int* const stage = smem;        // total_words
    const int S = stride + CH_PAD;  // row stride of a warp's buffers
    float* const buffers = reinterpret_cast<float*>(stage + total_words) + warp * 2 * G * S;
    for (int j = 0; j < layer_count; ++j)
        ch_copy_words(stage + s_offset[j], reinterpret_cast<const int*>(chain_ptrs[layer + j]), s_offset[j + 1] - s_offset[j]);
    __syncthreads();

    const int last = layer + layer_count - 1;
    const int width_in = widths[layer - 1];
    for (int g0 = blockIdx.x + gridDim.x * warp; g0 < group_count; g0 += gridDim.x * WARPS) {
        const int first = g0 * G;
        __syncwarp();  // the previous group's reads of the buffers are done
        float* in = buffers;
        float* out = buffers + G * S;
        // the group's rows, zero past their width and past the last row
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const bool valid = first + g < rows;
            for (int c = lane; c < S; c += 32)
                in[g * S + c] = (valid && c < width_in) ? __ldcg(y_in + (size_t)(first + g) * stride + c) : 0.0f;
        }
        __syncwarp();
        int lit[G];          // each row's weighted non-zeros after the layer
        unsigned bits[G][C];  // each row's non-zero columns after the launch's last layer
        bool done = false;   // whether the group ran the launch's last layer
        int live = 0;
        for (int j = 0; j < layer_count; ++j) {
            const int l = layer + j;
            const int width = widths[l];
            const int k4 = k4s[l];
            const float w = w_uniforms[l];
            const int k8 = k8s[l];
            const int* const layer_words = stage + s_offset[j];
            const int* const codes = layer_words + k4 * width;
            const float* const table = reinterpret_cast<const float*>(codes + k8 * width);
            const int* const sizes = reinterpret_cast<const int*>(size_ptrs[l]);
            float acc[G][C];
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int c = 0; c < C; ++c) acc[g][c] = 0.0f;
            if (k8)  // (uniform across the block)
                ch_sums<C, G, true>(acc, layer_words, codes, table, k4, width, in, S, w);
            else
                ch_sums<C, G, false>(acc, layer_words, codes, table, k4, width, in, S, w);
            live = 0;
            int sum = 0;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                int mine = 0;
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    if (32 * c >= width) {  // (uniform across the warp: width is a multiple of 32)
                        bits[g][c] = 0u;
                        continue;
                    }
                    const float a = acc[g][c];
                    const float y = a != 0.0f ? fminf(fmaxf(a + bias, 0.0f), clamp) : 0.0f;
                    out[g * S + lane + 32 * c] = y;
                    if (y != 0.0f) mine += __ldg(sizes + lane + 32 * c);
                    bits[g][c] = __ballot_sync(0xffffffffu, y != 0.0f);
                }
                out[g * S + width + lane] = 0.0f;  // the next layer's padding steps read these
                lit[g] = __reduce_add_sync(0xffffffffu, mine);
                live += lit[g] > 0;
                sum += lit[g];
            }
            if (lane == 0) {
                if (j < layer_count - 1 && live) atomicAdd(&s_live[j], live);
                if (sum) atomicAdd(&s_nnz[j], (unsigned long long)sum);
                if (row_layers) atomicAdd(&s_groups[j], 1);
            }
            float* const t = in;
            in = out;
            out = t;
            __syncwarp();
            if (!live) break;  // every row of the group is dead: later layers add nothing
            done = j == layer_count - 1;
        }
        if (!done) continue;

        // the live rows out, with their ids and (monitor) per-32-column counts of Y
        int base = 0;
        if (lane == 0) base = atomicAdd(&counts[last + 1], live);
        base = __shfl_sync(0xffffffffu, base, 0);
        const int width = widths[last];
        const int tiles = n / 32;
        const unsigned* const masks = reinterpret_cast<const unsigned*>(mask_ptrs[last]);
        const int* const groups = reinterpret_cast<const int*>(group_ptrs[last]);
        int rank = 0;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (lit[g] <= 0) continue;  // (uniform across the warp)
            const size_t dst = (size_t)base + rank++;
            for (int c = lane; c < width; c += 32) y_out[dst * stride + c] = in[g * S + c];
            if (lane == 0) {
                ids_out[dst] = ids_in[first + g];
                if (row_nnz) row_nnz[dst] = lit[g];
            }
            if (!tile_nnz) continue;
            if (masks) {  // a lane per tile: the groups that appear in it, by level
                const int levels = mask_levels[last], mask_words = width / 32;
                for (int tile = lane; tile < tiles; tile += 32) {
                    int count = 0;
                    for (int level = 0; level < levels; ++level)
#pragma unroll
                        for (int c = 0; c < C; ++c)
                            if (c < mask_words)
                                count += __popc(bits[g][c] & __ldg(masks + ((size_t)level * tiles + tile) * mask_words + c));
                    tile_nnz[dst * tiles + tile] = (unsigned char)count;
                }
            } else {  // a ballot per tile: lane j looks up column j's group
                for (int tile = 0; tile < tiles; ++tile) {
                    const unsigned nonzero = __ballot_sync(0xffffffffu, in[g * S + __ldg(groups + tile * 32 + lane)] != 0.0f);
                    if (lane == 0) tile_nnz[dst * tiles + tile] = (unsigned char)__popc(nonzero);
                }
            }
        }
    }
    __syncthreads();
    if (threadIdx.x < layer_count) {  // the block's per-layer counts, one atomic each
        const int j = threadIdx.x;
        if (j < layer_count - 1 && s_live[j]) atomicAdd(&counts[layer + j + 1], s_live[j]);
        if (s_nnz[j]) atomicAdd(&nnz_counts[layer + j + 1], s_nnz[j]);
        if (row_layers && s_groups[j]) atomicAdd(&row_layers[layer + j], s_groups[j] * G);
    }
}

#ifndef CH_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define CH_INSTANCE(C, G)                                                                                         \
    template __global__ void gc_chain<C, G>(const float*, const int*, float*, int*, const unsigned long long*, const int*, const int*, const float*, \
                                            const int*, const unsigned long long*, const unsigned long long*, int*,      \
                                            unsigned long long*, int, int, unsigned char*, int*, int*,                  \
                                            const unsigned long long*, const int*, int, int, float, float);
CH_INSTANCE(1, 1)
CH_INSTANCE(2, 1)
CH_INSTANCE(1, 2)
CH_INSTANCE(2, 2)
#endif
