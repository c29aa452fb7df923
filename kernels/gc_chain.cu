// The merged network's later launches with a team of warps per group of rows
// (spartan_py/engines/merged/, "chain" launches): each team carries its rows through all of the
// launch's layers on its own, with no block barrier between layers. Same layer semantics, sums in the same order,
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
//   In shared memory a layer's stage is followed by its column sizes (size_ptrs[l], width_l
//   ints); a launch copies every layer's at its start (cp.async, sm_80 and later).
//   y_in, y_out : live rows of Z, row stride `stride` floats; counts[layer] rows come in.
//   a launch runs only layers of width at most 32 C.
//
// Work split: a team of P warps takes G rows (rows past the end are zero); lane j of the
// team's warp h computes columns 32 h + j, 32 (P + h) + j, ... (C of them) of each. P = 1: a
// warp alone, __syncwarp between layers. P = 2: two warps meeting at a named barrier between
// layers (ids 1..15, so at most 15 teams; CH_PAIR_THREADS); with G = 2 each step's decoding serves
// two rows while as many warps stay busy as with lone warps of one row (these launches are
// bound by instruction issue). Teams take groups block by block in turn, so that few rows
// spread over every SM. A column's indices at one step fall in distinct banks for the 32
// lanes (the plan's order, kernels/gc_merged.cu), so a step's operand reads do not conflict.

#ifndef CH_THREADS
#define CH_THREADS 1024  // a block whose teams are lone warps
#endif
#ifndef CH_PAIR_THREADS
#define CH_PAIR_THREADS 512  // a block whose teams are pairs (CHAIN_PAIR_THREADS in engines/merged/chain.py)
#endif
#define CH_PAD 32
#define CH_MAX_LAYERS 32  // layers a launch may take (MAX_LAUNCH_LAYERS in engines/shared/launches.py)
#define CH_MAX_TEAMS 15   // teams of more than one warp a block may hold (named barriers 1..15)

// the team's warps meet: P = 1 a warp's own sync, else named barrier 1 + team of 32 P threads
template <int P>
__device__ __forceinline__ void ch_team_sync(int team) {
    if (P == 1)
        __syncwarp();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(team + 1), "n"(32 * P) : "memory");
}

// Start copying count words from global src to shared dst by every thread of the block
// (cp.async, 16 bytes at a time when both are aligned): nothing waits on registers, so every
// layer's copy is in flight at once; ch_copy_wait() waits for them all.
__device__ __forceinline__ void ch_copy_async(int* __restrict__ dst, const int* __restrict__ src, int count) {
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if (((reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(dst)) & 15) == 0 && (count & 3) == 0) {
        for (int e = threadIdx.x; e < count / 4; e += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + 16 * e), "l"(src + 4 * e) : "memory");
        return;
    }
    for (int e = threadIdx.x; e < count; e += blockDim.x)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(base + 4 * e), "l"(src + e) : "memory");
}

__device__ __forceinline__ void ch_copy_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// CH_ASYNC_PROLOGUE (a variant, off by default until measured: benchmarks/gc_merged_variants.py):
// the launch's layer parameters and pointers read by warp 0 at once (one round trip, not two a
// layer one after another), and each layer's stage copied behind an mbarrier of its own, so
// that a team starts layer j as soon as layer j has arrived instead of after every layer's
// copy and two block barriers. Same sums in the same order: the outputs are the same bits.
#ifndef CH_ASYNC_PROLOGUE
#define CH_ASYNC_PROLOGUE 0
#endif
// CH_EXPAND_FINAL (a variant, as CH_ASYNC_PROLOGUE): the kernel takes one more argument,
// `expanded` (null, or the n-wide output of the network's last launch), and writes each row it
// writes out there too, as gm_expand_rows (kernels/gc_merged.cu) would after it: the same
// values, with no launch of their own.
#ifndef CH_EXPAND_FINAL
#define CH_EXPAND_FINAL 0
#endif
#if CH_EXPAND_FINAL
#define CH_EXPAND_PARAMETER , float* __restrict__ expanded
#define CH_EXPAND_TYPE , float*
#else
#define CH_EXPAND_PARAMETER
#define CH_EXPAND_TYPE
#endif

__device__ __forceinline__ void ch_ready_init(unsigned long long* bar, int count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count)
                 : "memory");
}

// the barrier completes its phase once every thread's cp.async issued before this call have landed
__device__ __forceinline__ void ch_ready_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
                 : "memory");
}

// wait for the barrier's first phase (each launch uses its barriers once)
__device__ __forceinline__ void ch_ready_wait(unsigned long long* bar) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    unsigned done = 0;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(address)
            : "memory");
    } while (!done);
}

// Four steps of the sums of G rows x C columns: step q's input of column c is byte q of
// word[c], its weight entry (CODED) nibble q of code[c] >> shift, else w_uniform. The byte
// comes out with one permute, and the nibble, scaled to a byte offset, is OR-ed into `table`
// (the shared address of a 64-byte aligned table; inline PTX, since the compiler would add), so
// that each operand's address is one instruction (an instruction count: these launches are
// bound by issue, not by memory).
template <int C, int G, bool CODED>
__device__ __forceinline__ void ch_quad(float (&acc)[G][C], const int (&word)[C], const int (&code)[C], int shift,
                                        const float* __restrict__ in, int S, unsigned table,
                                        float w_uniform) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int i = __byte_perm(word[c], 0, 0x4440 + q);
            const int at = shift + 4 * q;  // the nibble's first bit (a constant once unrolled)
            const int offset = at >= 2 ? (code[c] >> (at - 2)) & 0x3c : (code[c] << 2) & 0x3c;
            float w = w_uniform;
            if (CODED) asm volatile("ld.shared.f32 %0, [%1];" : "=f"(w) : "r"(table | offset));
#pragma unroll
            for (int g = 0; g < G; ++g) acc[g][c] = fmaf(w, in[g * S + i], acc[g][c]);
        }
}

// A layer's sums: k4 index words a column from `words`, and, when CODED, k8 code words from
// `codes` into the weights of `table`; the lane's columns 32 (P c + h) + lane (h: the warp's
// place in its team) past `width` are not computed.
template <int C, int G, int P, bool CODED>
__device__ __forceinline__ void ch_sums(float (&acc)[G][C], const int* __restrict__ words, const int* __restrict__ codes,
                                        unsigned table, int k4, int width, const float* __restrict__ in,
                                        int S, float w_uniform, int h) {
    const int lane = threadIdx.x & 31;
    int word[C], code[C];
#pragma unroll
    for (int c = 0; c < C; ++c) code[c] = 0;
    int s4 = 0;
    for (; s4 + 1 < k4; s4 += 2) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (CODED) code[c] = 32 * (P * c + h) < width ? codes[(s4 >> 1) * width + lane + 32 * (P * c + h)] : 0;
            word[c] = 32 * (P * c + h) < width ? words[s4 * width + lane + 32 * (P * c + h)] : 0;
        }
        ch_quad<C, G, CODED>(acc, word, code, 0, in, S, table, w_uniform);
#pragma unroll
        for (int c = 0; c < C; ++c)
            word[c] = 32 * (P * c + h) < width ? words[(s4 + 1) * width + lane + 32 * (P * c + h)] : 0;
        ch_quad<C, G, CODED>(acc, word, code, 16, in, S, table, w_uniform);
    }
    if (s4 < k4) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (CODED) code[c] = 32 * (P * c + h) < width ? codes[(s4 >> 1) * width + lane + 32 * (P * c + h)] : 0;
            word[c] = 32 * (P * c + h) < width ? words[s4 * width + lane + 32 * (P * c + h)] : 0;
        }
        ch_quad<C, G, CODED>(acc, word, code, 0, in, S, table, w_uniform);
    }
}

template <int C, int G, int P>
__global__ void __launch_bounds__(P == 1 ? CH_THREADS : CH_PAIR_THREADS, 1)
gc_chain(const float* __restrict__ y_in, const int* __restrict__ ids_in, float* __restrict__ y_out, int* __restrict__ ids_out,
         const unsigned long long* __restrict__ chain_ptrs, const int* __restrict__ k4s, const int* __restrict__ k8s,
         const float* __restrict__ w_uniforms,
         const int* __restrict__ widths, const unsigned long long* __restrict__ size_ptrs,
         const unsigned long long* __restrict__ group_ptrs, int* __restrict__ counts,
         unsigned long long* __restrict__ nnz_counts, int layer, int layer_count, unsigned char* __restrict__ tile_nnz,
         int* __restrict__ row_nnz, int* __restrict__ row_layers, const unsigned long long* __restrict__ mask_ptrs,
         const int* __restrict__ mask_levels, int n, int stride, float bias, float clamp CH_EXPAND_PARAMETER) {
    extern __shared__ int4 smem4[];
    int* const smem = reinterpret_cast<int*>(smem4);
    __shared__ int s_offset[CH_MAX_LAYERS + 1];  // word offset of each layer in the stage
    __shared__ int s_live[CH_MAX_LAYERS];        // per layer, rows of this block live after it
    __shared__ unsigned long long s_nnz[CH_MAX_LAYERS];
    __shared__ int s_groups[CH_MAX_LAYERS];  // groups of this block that ran the layer
    // each layer's k4, k8, width and uniform weight, read from here between layers (a global
    // load there is a round trip to L2 on every warp's path: each SM's first reader misses)
    __shared__ int s_k4[CH_MAX_LAYERS], s_k8[CH_MAX_LAYERS], s_width[CH_MAX_LAYERS + 1];
    __shared__ float s_w[CH_MAX_LAYERS];
    // each layer's table of weights, 64-byte aligned so that an entry's shared address is the
    // table's OR its scaled nibble (one instruction a step fewer than an add after the mask)
    __shared__ __align__(64) float s_table[CH_MAX_LAYERS][16];
    __shared__ int s_part[P > 1 ? CH_MAX_TEAMS : 1][2][P][G];  // (P > 1) each warp's part of a row's count, by layer parity
#if CH_ASYNC_PROLOGUE
    __shared__ unsigned long long s_stage_ptr[CH_MAX_LAYERS], s_size_ptr[CH_MAX_LAYERS];
    __shared__ unsigned long long s_ready[CH_MAX_LAYERS];  // layer j's stage, sizes and table have landed
#endif
    const int teams = (blockDim.x >> 5) / P;
    const int lane = threadIdx.x & 31;
    const int team = (threadIdx.x >> 5) / P;
    const int h = (threadIdx.x >> 5) % P;  // the warp's place in its team
    const int rows = counts[layer];
    const int group_count = (rows + G - 1) / G;
    if (blockIdx.x >= group_count) return;  // (uniform across the block) nothing to do here

#if CH_ASYNC_PROLOGUE
    if (threadIdx.x < 32) {  // warp 0: every layer's parameters at once (layer_count <= 32), offsets by a scan
        const int j = threadIdx.x;
        const bool mine = j < layer_count;
        const int l = layer + (mine ? j : 0);
        const int k4 = k4s[l], k8 = k8s[l], width = widths[l];
        const float w = w_uniforms[l];
        const unsigned long long stage_ptr = chain_ptrs[l], size_ptr = size_ptrs[l];
        int words = mine ? (k4 + k8 + 1) * width + 16 : 0;  // + the column sizes
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int before = __shfl_up_sync(0xffffffffu, words, d);
            if (j >= d) words += before;
        }
        if (j == 0) s_offset[0] = 0;
        if (mine) {
            s_offset[j + 1] = words;
            s_k4[j] = k4;
            s_k8[j] = k8;
            s_width[j] = width;
            s_w[j] = w;
            s_stage_ptr[j] = stage_ptr;
            s_size_ptr[j] = size_ptr;
            s_live[j] = 0;
            s_nnz[j] = 0ull;
            s_groups[j] = 0;
            ch_ready_init(&s_ready[j], blockDim.x);
        }
    }
    __syncthreads();
    const int total_words = s_offset[layer_count];
    int* const stage = smem;        // total_words
    const int S = stride + CH_PAD;  // row stride of a team's buffers
    float* const buffers = reinterpret_cast<float*>(stage + total_words) + team * 2 * G * S;
    for (int j = 0; j < layer_count; ++j) {  // a layer's stage, its column sizes and its table, then its barrier
        const int sizes_at = s_offset[j + 1] - s_width[j];
        const int* const src = reinterpret_cast<const int*>(s_stage_ptr[j]);
        ch_copy_async(stage + s_offset[j], src, sizes_at - s_offset[j]);
        ch_copy_async(stage + sizes_at, reinterpret_cast<const int*>(s_size_ptr[j]), s_width[j]);
        if (threadIdx.x < 16) {  // the table: the stage's last 16 words, into its aligned array
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&s_table[j][threadIdx.x]));
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src + (sizes_at - s_offset[j]) - 16 + threadIdx.x)
                         : "memory");
        }
        ch_ready_arrive(&s_ready[j]);
    }
    int ready = 0;  // layers this thread has seen arrive
#else
    if (threadIdx.x == 0) {
        int offset = 0;
        for (int j = 0; j < layer_count; ++j) {
            s_offset[j] = offset;
            offset += (k4s[layer + j] + k8s[layer + j] + 1) * widths[layer + j] + 16;  // + the column sizes
        }
        s_offset[layer_count] = offset;
    }
    if (threadIdx.x < layer_count) {
        const int l = layer + threadIdx.x;
        s_k4[threadIdx.x] = k4s[l];
        s_k8[threadIdx.x] = k8s[l];
        s_width[threadIdx.x] = widths[l];
        s_w[threadIdx.x] = w_uniforms[l];
    }
    if (threadIdx.x < layer_count) {
        s_live[threadIdx.x] = 0;
        s_nnz[threadIdx.x] = 0ull;
        s_groups[threadIdx.x] = 0;
    }
    __syncthreads();
    const int total_words = s_offset[layer_count];
    int* const stage = smem;        // total_words
    const int S = stride + CH_PAD;  // row stride of a team's buffers
    float* const buffers = reinterpret_cast<float*>(stage + total_words) + team * 2 * G * S;
    for (int j = 0; j < layer_count; ++j) {  // a layer's stage, then its column sizes
        const int sizes_at = s_offset[j + 1] - s_width[j];
        ch_copy_async(stage + s_offset[j], reinterpret_cast<const int*>(chain_ptrs[layer + j]), sizes_at - s_offset[j]);
        ch_copy_async(stage + sizes_at, reinterpret_cast<const int*>(size_ptrs[layer + j]), s_width[j]);
    }
    ch_copy_wait();
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * layer_count; e += blockDim.x)  // each table sits before its column sizes
        s_table[e >> 4][e & 15] = reinterpret_cast<const float*>(stage + s_offset[(e >> 4) + 1] - s_width[e >> 4] - 16)[e & 15];
    __syncthreads();

#endif
    const int last = layer + layer_count - 1;
    const int width_in = widths[layer - 1];
    // the monitor's masks (see the header): with one level and at most 32 tiles (the common
    // case) each lane's tile's words are read once per launch, not per row
    const unsigned* const masks = reinterpret_cast<const unsigned*>(mask_ptrs[last]);
    const int tiles = n / 32;
    const int mask_words = s_width[layer_count - 1] / 32;
    const bool lane_masks = tile_nnz && masks && mask_levels[last] == 1 && tiles <= 32;
    unsigned lane_mask[C * P];
#pragma unroll
    for (int c = 0; c < C * P; ++c)
        lane_mask[c] = lane_masks && lane < tiles && c < mask_words ? __ldg(masks + lane * mask_words + c) : 0u;
    for (int g0 = blockIdx.x + gridDim.x * team; g0 < group_count; g0 += gridDim.x * teams) {
        const int first = g0 * G;
        ch_team_sync<P>(team);  // the previous group's reads of the buffers are done
        float* in = buffers;
        float* out = buffers + G * S;
        // the group's rows, zero past their width and past the last row
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const bool valid = first + g < rows;
            for (int c = 32 * h + lane; c < S; c += 32 * P)
                in[g * S + c] = (valid && c < width_in) ? __ldcg(y_in + (size_t)(first + g) * stride + c) : 0.0f;
        }
        ch_team_sync<P>(team);
        int lit[G];  // each row's weighted non-zeros after the layer
        bool done = false;   // whether the group ran the launch's last layer
        int live = 0;
        for (int j = 0; j < layer_count; ++j) {
#if CH_ASYNC_PROLOGUE
            if (j >= ready) {
                ch_ready_wait(&s_ready[j]);
                ready = j + 1;
            }
#endif
            const int width = s_width[j];
            const int k4 = s_k4[j];
            const float w = s_w[j];
            const int k8 = s_k8[j];
            const int* const layer_words = stage + s_offset[j];
            const int* const codes = layer_words + k4 * width;
            const unsigned table = static_cast<unsigned>(__cvta_generic_to_shared(&s_table[j][0]));
            const int* const sizes = stage + s_offset[j + 1] - width;
            float acc[G][C];
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int c = 0; c < C; ++c) acc[g][c] = 0.0f;
            if (k8)  // (uniform across the block)
                ch_sums<C, G, P, true>(acc, layer_words, codes, table, k4, width, in, S, w, h);
            else
                ch_sums<C, G, P, false>(acc, layer_words, codes, table, k4, width, in, S, w, h);
            live = 0;
            int sum = 0;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                int mine = 0;
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    const int column = 32 * (P * c + h) + lane;
                    if (column - lane >= width) continue;  // (uniform across the warp: width is a multiple of 32)
                    const float a = acc[g][c];
                    const float y = a != 0.0f ? fminf(fmaxf(a + bias, 0.0f), clamp) : 0.0f;
                    out[g * S + column] = y;
                    if (y != 0.0f) mine += sizes[column];
                }
                if (h == 0) out[g * S + width + lane] = 0.0f;  // the next layer's padding steps read these
                lit[g] = __reduce_add_sync(0xffffffffu, mine);
                if (P > 1 && lane == 0) s_part[P > 1 ? team : 0][j & 1][h][g] = lit[g];
            }
            ch_team_sync<P>(team);  // the layer's outputs (and the parts of its counts) are in
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (P > 1) {
                    lit[g] = 0;
#pragma unroll
                    for (int p = 0; p < P; ++p) lit[g] += s_part[P > 1 ? team : 0][j & 1][p][g];
                }
                live += lit[g] > 0;
                sum += lit[g];
            }
            if (lane == 0 && h == 0) {
                if (j < layer_count - 1 && live) atomicAdd(&s_live[j], live);
                if (sum) atomicAdd(&s_nnz[j], (unsigned long long)sum);
                if (row_layers) atomicAdd(&s_groups[j], 1);
            }
            float* const t = in;
            in = out;
            out = t;
            if (!live) break;  // every row of the group is dead: later layers add nothing
            done = j == layer_count - 1;
        }
        if (!done || h != 0) continue;  // the team's first warp writes the group out

        // the live rows out, with their ids and (monitor) per-32-column counts of Y
        int base = 0;
        if (lane == 0) base = atomicAdd(&counts[last + 1], live);
        base = __shfl_sync(0xffffffffu, base, 0);
        const int width = s_width[layer_count - 1];
        const int* const groups = reinterpret_cast<const int*>(group_ptrs[last]);
        int rank = 0;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (lit[g] <= 0) continue;  // (uniform across the warp)
            const size_t dst = (size_t)base + rank++;
            for (int c = lane; c < width; c += 32) y_out[dst * stride + c] = in[g * S + c];
#if CH_EXPAND_FINAL
            if (expanded) {  // the row n wide: y[j] = z[groups[j]], four columns a lane and step
                const int4* const groups4 = reinterpret_cast<const int4*>(groups);
                float4* const wide = reinterpret_cast<float4*>(expanded + dst * n);
                const float* const z = in + g * S;
#pragma unroll 4
                for (int c = lane; c < n / 4; c += 32) {
                    const int4 q = __ldg(groups4 + c);
                    wide[c] = make_float4(z[q.x], z[q.y], z[q.z], z[q.w]);
                }
            }
#endif
            if (lane == 0) {
                ids_out[dst] = ids_in[first + g];
                if (row_nnz) row_nnz[dst] = lit[g];
            }
            if (!tile_nnz) continue;
            if (masks) {  // a lane per tile: the groups that appear in it, by level
                unsigned bits[C * P];  // the row's non-zero columns, a word per 32
#pragma unroll
                for (int c = 0; c < C * P; ++c)
                    bits[c] = c < mask_words ? __ballot_sync(0xffffffffu, in[g * S + 32 * c + lane] != 0.0f) : 0u;
                if (lane_masks) {
                    int count = 0;
#pragma unroll
                    for (int c = 0; c < C * P; ++c) count += __popc(bits[c] & lane_mask[c]);
                    if (lane < tiles) tile_nnz[dst * tiles + lane] = (unsigned char)count;
                    continue;
                }
                const int levels = mask_levels[last];
                for (int tile = lane; tile < tiles; tile += 32) {
                    int count = 0;
                    for (int level = 0; level < levels; ++level)
#pragma unroll
                        for (int c = 0; c < C * P; ++c)
                            if (c < mask_words)
                                count += __popc(bits[c] & __ldg(masks + ((size_t)level * tiles + tile) * mask_words + c));
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
#if CH_ASYNC_PROLOGUE
    ch_copy_wait();  // layers no team reached may still be landing
    // and their barriers' arrivals may still be pending: no block leaves with one in flight
    for (int j = 0; j < layer_count; ++j) ch_ready_wait(&s_ready[j]);
#endif
    __syncthreads();
    if (threadIdx.x < layer_count) {  // the block's per-layer counts, one atomic each
        const int j = threadIdx.x;
        if (j < layer_count - 1 && s_live[j]) atomicAdd(&counts[layer + j + 1], s_live[j]);
        if (s_nnz[j]) atomicAdd(&nnz_counts[layer + j + 1], s_nnz[j]);
        if (row_layers && s_groups[j]) atomicAdd(&row_layers[layer + j], s_groups[j] * G);
    }
}

#ifndef CH_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define CH_INSTANCE(C, G, P)                                                                                      \
    template __global__ void gc_chain<C, G, P>(const float*, const int*, float*, int*, const unsigned long long*, const int*, const int*, const float*, \
                                            const int*, const unsigned long long*, const unsigned long long*, int*,      \
                                            unsigned long long*, int, int, unsigned char*, int*, int*,                  \
                                            const unsigned long long*, const int*, int, int, float, float CH_EXPAND_TYPE);
CH_INSTANCE(1, 1, 1)
CH_INSTANCE(2, 1, 1)
CH_INSTANCE(1, 2, 1)
CH_INSTANCE(2, 2, 1)
CH_INSTANCE(1, 1, 2)
CH_INSTANCE(1, 2, 2)
#endif
