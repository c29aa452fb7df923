// Sparse DNN Graph Challenge on merged columns (spartan_py/engines/support/column_merge.py): outputs
// with identical weight columns are computed once, so a row's state after layer l is
// Z_l (width_l floats) and Y_l[:, j] = Z_l[:, groups_l[j]]. Same layer semantics, live-row
// compaction, counters and fused monitor as kernels/gc_layer.cu; compiled at run time by
// CuPy and, in CI, by nvcc for sm_80 and sm_90.
//
// Layout
//   csr_*       : the batch's input rows (n wide), read by the first launch only.
//   input_value : 0, or the value every stored input entry has (binary inputs, as the Graph
//                 Challenge's), for the gc_merged<R, true> instances, which run first
//                 launches only: the tile then holds each row as n / 32 + 1 words of bits,
//                 not n + 32 floats (1/32 of the shared memory, so more blocks per SM), and
//                 csr_val is not read. The sums see the same operands either way.
//   pixel_columns, count_words: null and 0, or, for gc_merged<R, true> when layer 0's weights
//                 are one value (spartan_py/engines/support/input_counts.py), each input
//                 pixel's merged columns of layer 0 as the halves of a word (0xffff: none), and the
//                 words a row of the counts tile takes. The first launch then counts each
//                 row's lit inputs of every merged column (a scatter of its ~100 pixels)
//                 instead of testing the column's inputs, and reads the column's sum from a
//                 table of fmaf chains: acc after c lit inputs is c fmaf(w, input_value, acc)
//                 in a row, since the steps on unlit inputs add w * 0, so the sums are the
//                 same floats, bit for bit.
//   y_dense     : null, or the input rows expanded (rows x n) when a tile of n-wide rows does
//                 not fit shared memory; the first layer then gathers from it.
//   y_in, y_out : live rows of Z, row stride `stride` floats (the widest layer, padded).
//   per layer l (device pointers as 64-bit integers): w_idx (int32; uint16 for GM_INDEX16) / w_val (float32 or
//                 null: uniform weight) [k * width_l + h]; sizes (int32 [width_l]: original
//                 outputs in column h, 0 for padding); groups (int32 [n]: column of output j).
//   widths[l]   : merged columns of layer l (a multiple of 32); the input of layer l is
//                 width_{l-1} wide (n for l = 0) and followed by 32 zero columns that padding
//                 steps read.
//   counts, nnz_counts, tile_nnz, row_nnz, row_layers: as in gc_layer.cu, in terms of the
//                 original n-wide rows (non-zeros are weighted by group size).
//   mask_ptrs[l]: null, or the monitor's masks (uint32 [levels][n / 32][width_l / 32]): bit h
//                 of [v][c][w] set when column 32 w + h appears more than v times among the
//                 original columns of tile c; mask_levels[l] = levels. Given only when a
//                 tile's R x n / 32 one-byte counts fit the stage. Without masks a tile's
//                 count looks its 32 columns' groups up.
//   stage_words : shared memory (4-byte words) for staging a layer's indices, weights and
//                 column sizes (a one-layer launch stages its layer once per block).
//   split_part  : 0: the launch takes all the live rows. 1 or 2: the head or the tail of a later
//                 launch split in two (spartan_py/engines/merged/plan.py, split_cut): of L live
//                 rows, the head takes the whole rounds of split_round_rows (its tile rows x its
//                 grid) and the tail the rest, in shorter tiles, where the rest fits one round
//                 of the tail (split_tail_rows); else the head takes all L. A last round of
//                 short tiles costs less than a round of tall ones.
//
// Work split: a block holds R rows in shared memory in two buffers (in and out of a layer);
// thread t computes items t, t + GM_THREADS, ... of the R x width_l outputs; a warp's 32
// items are 32 columns of one row, whose reads are bank-conflict-free by the plan's order.
// Where GM_THREADS is a multiple of width_l, a thread's items are one column of several
// rows, and each step's index and weight are loaded once for all of them (in the later
// module, GM_LATER below, a thread's items are one column of several rows of any tile). The host builds
// the first launch's blocks of 256 threads and later launches' (wide networks, few live rows)
// of 1024, one an SM, on tiles of several rows; a launch's last round of rows takes tiles half
// as tall (split_part; spartan_py/engines/merged/plan.py has the measured round times).

#ifndef GM_THREADS
#define GM_THREADS 256
#endif
#define GM_PAD 32
#ifndef GM_UNROLL
#define GM_UNROLL 4  // steps of a layer's sums in flight at once
#endif
#define GM_PRAGMA(x) _Pragma(#x)
#define GM_UNROLL_PRAGMA(n) GM_PRAGMA(unroll n)
#ifndef GM_COUNT_MAX
#define GM_COUNT_MAX 64  // layer 0's steps at most, for the counts path (input_counts.COUNT_MAX_STEPS)
#endif
#ifndef GM_MIN_BLOCKS
#define GM_MIN_BLOCKS (1024 / GM_THREADS)  // 64 registers a thread (plan.MERGED_SM_THREADS)
#endif
// GM_LATER: the module of the later block-tile launches on tiles of two rows or more (wide
// networks' tails; spartan_py/engines/merged/plan.py, later_module_shares_rows), whose time is
// the layers' indices streamed from L2 once per tile and layer (a 65536-neuron tail layer's
// 51 x 4096). There a thread's GM_ILP items are one column of up to GM_ILP rows of the tile, so
// that one index load serves them all (GM_SHARE_ROWS), and no first launch runs
// (GM_FIRST_LAUNCHES 0: the input-tile paths are not built, which keeps the registers).
// GM_INDEX16: the indices in device memory are 16-bit (a later layer's input is narrower than
// 65536 columns), half the bytes; a staged layer's are widened to ints in shared memory.
#ifdef GM_LATER
#define GM_SHARE_ROWS 1
#define GM_FIRST_LAUNCHES 0
#else
#define GM_SHARE_ROWS 0
#define GM_FIRST_LAUNCHES 1
#endif
// First-launch variants (off by default until measured: benchmarks/gc_merged_variants.py); both
// leave every operand and sum as it is, so the outputs are the same bits.
// GM_PIXELS_SHARED: the counts path's pixel table (pixel_columns, n words) read into shared
// memory once per block, so that a lit input's merged columns are a shared load instead of a
// second dependent round trip to L2 after its index's (built only for networks of up to
// GM_PIXELS_MAX neurons: spartan_py/engines/merged/variants.py).
// GM_SCATTER_AT_ONCE: a warp loads the input entries of all its rows of the tile (R / 8 rows in
// blocks of 256 threads) before it scatters any, instead of one row after another: one round
// trip a tile instead of one a row.
#ifndef GM_PIXELS_SHARED
#define GM_PIXELS_SHARED 0
#endif
#ifndef GM_PIXELS_MAX
#define GM_PIXELS_MAX 1024
#endif
#ifndef GM_SCATTER_AT_ONCE
#define GM_SCATTER_AT_ONCE 0
#endif
#ifndef GM_SCATTER_LOADS
#define GM_SCATTER_LOADS 4  // GM_SCATTER_AT_ONCE: loads a row and lane in flight (32 of them cover a row's entries)
#endif
#ifdef GM_INDEX16
typedef unsigned short GmIndex;
#else
typedef int GmIndex;
#endif

// The ILP sums of items (r[j], h[j]) over the layer's k steps. One instance per weight source
// (staged in shared memory or in global memory) and kind (uniform or per-entry weights), so
// that the loop has no branch and the compiler knows each pointer's address space: shared
// loads, and one add per item and step for its addresses.
#define GM_ILP 4
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GM_SAME_COLUMN 1
#else
#define GM_SAME_COLUMN 0
#endif
// where a layer's operands come from: shared floats, global floats (the expanded inputs of a
// network too wide for a tile), or the first launch's shared bits (see input_value)
// or its counts of lit inputs per merged column (see pixel_columns)
enum GmSource { GM_SHARED = 0, GM_GLOBAL = 1, GM_BITS = 2, GM_COUNTS = 3 };

// SHARE: items j, j + 1, ..., j + SHARE - 1 (j a multiple of SHARE) are one column of SHARE
// rows, so that each step loads one index and weight for all of them (GM_ILP: the block's
// threads a multiple of the layer's width; fewer: a tile of SHARE rows, GM_SHARE_ROWS).
// IDX: the indices' type where they are read (shared stage: int; device memory: GmIndex).
template <int SRC, bool UNIFORM, int SHARE, typename IDX>
__device__ __forceinline__ void gm_sums(float (&acc)[GM_ILP], const int (&r)[GM_ILP], const int (&h)[GM_ILP],
                                        const float* __restrict__ src, int src_stride, int width_in, int valid_rows,
                                        const IDX* __restrict__ w_idx, const float* __restrict__ w_val, float w_uniform,
                                        int width, int k, float input_value) {
    const float* row[GM_ILP];  // GM_BITS: the row's words (src_stride words a row)
    bool valid[GM_ILP];
#pragma unroll
    for (int j = 0; j < GM_ILP; ++j) {
        row[j] = SRC == GM_GLOBAL ? src + (size_t)r[j] * src_stride : src + r[j] * src_stride;
        valid[j] = r[j] < valid_rows;
        acc[j] = 0.0f;
    }
    GM_UNROLL_PRAGMA(GM_UNROLL)
    for (int s = 0; s < k; ++s) {
        const int i0 = w_idx[h[0]];
        const float w0 = UNIFORM ? w_uniform : w_val[h[0]];
        int i_shared = i0;
        float w_shared = w0;
#pragma unroll
        for (int j = 0; j < GM_ILP; ++j) {
            if (SHARE > 1 && SHARE < GM_ILP && j % SHARE == 0 && j) {  // the next group's column
                i_shared = w_idx[h[j]];
                w_shared = UNIFORM ? w_uniform : w_val[h[j]];
            }
            const int i = SHARE == 1 ? w_idx[h[j]] : i_shared;
            const float w = SHARE == 1 ? (UNIFORM ? w_uniform : w_val[h[j]]) : w_shared;
            float x;
            if constexpr (SRC == GM_GLOBAL) x = (valid[j] && i < width_in) ? __ldg(row[j] + i) : 0.0f;
            else if constexpr (SRC == GM_BITS) x = (reinterpret_cast<const unsigned*>(row[j])[i >> 5] >> (i & 31)) & 1u ? input_value : 0.0f;
            else x = row[j][i];
            acc[j] = fmaf(w, x, acc[j]);
        }
        w_idx += width;
        if (!UNIFORM) w_val += width;
    }
}

// gm_sums with the weights from `stage` (indices, then weights) when `staged`, else from
// w_idx / w_val (null: every weight is w_uniform); the branches are uniform across the block.
template <int SRC, int SHARE>
__device__ __forceinline__ void gm_sums_from(float (&acc)[GM_ILP], const int (&r)[GM_ILP], const int (&h)[GM_ILP],
                                             const float* __restrict__ src, int src_stride, int width_in, int valid_rows,
                                             bool staged, const int* __restrict__ stage, const GmIndex* __restrict__ w_idx,
                                             const float* __restrict__ w_val, float w_uniform, int width, int k,
                                             float input_value) {
    if (staged && !w_val)
        gm_sums<SRC, true, SHARE, int>(acc, r, h, src, src_stride, width_in, valid_rows, stage, nullptr, w_uniform, width, k, input_value);
    else if (staged)
        gm_sums<SRC, false, SHARE, int>(acc, r, h, src, src_stride, width_in, valid_rows, stage,
                                    reinterpret_cast<const float*>(stage + k * width), w_uniform, width, k, input_value);
    else if (!w_val)
        gm_sums<SRC, true, SHARE, GmIndex>(acc, r, h, src, src_stride, width_in, valid_rows, w_idx, nullptr, w_uniform, width, k,
                                           input_value);
    else
        gm_sums<SRC, false, SHARE, GmIndex>(acc, r, h, src, src_stride, width_in, valid_rows, w_idx, w_val, w_uniform, width, k,
                                            input_value);
}

// The epilogue of a thread's items (r[j], h[j]) where stored[j]: y = min(clamp, ReLU(acc +
// bias)) into dst, the row's weighted non-zeros into row_count, the warp's non-zero bits into
// nz_mask (a warp's items j are 32 columns of one row: width is a multiple of 32).
__device__ __forceinline__ void gm_store_items(const float (&acc)[GM_ILP], const int (&r)[GM_ILP], const int (&h)[GM_ILP],
                                               const bool (&stored)[GM_ILP], float* __restrict__ dst, int dst_stride,
                                               const int* __restrict__ sizes, float bias, float clamp, int* row_count,
                                               unsigned* nz_mask, int mask_words) {
#pragma unroll
    for (int j = 0; j < GM_ILP; ++j) {
        if (stored[j]) {  // uniform across the warp
            const float y = (acc[j] != 0.0f) ? fminf(fmaxf(acc[j] + bias, 0.0f), clamp) : 0.0f;
            dst[r[j] * dst_stride + h[j]] = y;
            const int lit = __reduce_add_sync(0xffffffffu, y != 0.0f ? sizes[h[j]] : 0);  // staged or global
            const unsigned nonzero = __ballot_sync(0xffffffffu, y != 0.0f);  // for the monitor's masks
            if ((threadIdx.x & 31) == 0) {
                if (lit) atomicAdd(&row_count[r[j]], lit);
                nz_mask[r[j] * mask_words + (h[j] >> 5)] = nonzero;
            }
        }
    }
}

// One layer: dst (R x stride) <- layer(src); adds each row's weighted non-zeros to row_count.
// The weights come from `stage` (indices, then weights) when `staged`, else from w_idx /
// w_val (null: every weight is w_uniform).
template <int R, int SRC>
__device__ __forceinline__ void gm_layer(const float* __restrict__ src, int src_stride, int width_in, int valid_rows,
                                         float* __restrict__ dst, int dst_stride, int width, bool staged,
                                         const int* __restrict__ stage, const GmIndex* __restrict__ w_idx,
                                         const float* __restrict__ w_val, float w_uniform, int k,
                                         const int* __restrict__ sizes, float bias, float clamp, int* row_count,
                                         unsigned* nz_mask, int mask_words, float input_value,
                                         const float* __restrict__ chain = nullptr) {
    const int items = R * width;
    // (the branches are uniform across the block)
    // every item of a thread in one column: built for tiles of 16 rows or more (fewer are for
    // wide layers) and for sm_90 on (sm_80 would spill at the 64-register cap)
    const bool same_h = GM_SAME_COLUMN && R >= 16 && GM_THREADS % width == 0;
    // the later launches' module (GM_SHARE_ROWS): a thread's items are one column of Q rows
    // of the tile, a slot being a (group of Q rows, column) pair, a warp's 32 slots 32
    // columns of one group
    constexpr int Q = GM_SHARE_ROWS && GM_SAME_COLUMN && SRC == GM_SHARED ? (R < GM_ILP ? R : GM_ILP) : 1;
    if (Q > 1 && !same_h) {
        const int slots = items / Q;
        for (int base = threadIdx.x; base < slots; base += (GM_ILP / Q) * GM_THREADS) {
            int r[GM_ILP], h[GM_ILP];
            bool stored[GM_ILP];
            float acc[GM_ILP];
#pragma unroll
            for (int j = 0; j < GM_ILP; ++j) {
                const int slot = base + (j / Q) * GM_THREADS;
                stored[j] = slot < slots;
                const int item = min(slot, slots - 1);  // past the end: the last slot (computed, not stored)
                const int group = item / width;
                h[j] = item - group * width;
                r[j] = group * Q + j % Q;
            }
            gm_sums_from<SRC, Q>(acc, r, h, src, src_stride, width_in, valid_rows, staged, stage, w_idx, w_val, w_uniform, width, k,
                                 input_value);
            gm_store_items(acc, r, h, stored, dst, dst_stride, sizes, bias, clamp, row_count, nz_mask, mask_words);
        }
    } else {
        for (int base = threadIdx.x; base < items; base += GM_ILP * GM_THREADS) {
            int r[GM_ILP], h[GM_ILP];
            bool stored[GM_ILP];
            float acc[GM_ILP];
#pragma unroll
            for (int j = 0; j < GM_ILP; ++j) {
                // past the end: same_h, a row of the tile in the same column; else the last item
                // (computed, not stored)
                const int item = same_h ? base + j * GM_THREADS : min(base + j * GM_THREADS, items - 1);
                stored[j] = base + j * GM_THREADS < items;  // items and threads are multiples of 32
                r[j] = item / width;
                h[j] = item - r[j] * width;
                if (same_h) r[j] = min(r[j], R - 1);
            }
            if constexpr (SRC == GM_COUNTS) {  // src: the tile's counts (src_stride words a row); chain: their sums
#pragma unroll
                for (int j = 0; j < GM_ILP; ++j) acc[j] = chain[reinterpret_cast<const int*>(src)[r[j] * src_stride + h[j]]];
            } else if (same_h)
                gm_sums_from<SRC, GM_ILP>(acc, r, h, src, src_stride, width_in, valid_rows, staged, stage, w_idx, w_val, w_uniform,
                                          width, k, input_value);
            else
                gm_sums_from<SRC, 1>(acc, r, h, src, src_stride, width_in, valid_rows, staged, stage, w_idx, w_val, w_uniform, width,
                                     k, input_value);
            gm_store_items(acc, r, h, stored, dst, dst_stride, sizes, bias, clamp, row_count, nz_mask, mask_words);
        }
    }
    // the next layer's padding steps read columns width .. width + 31: keep them zero
    for (int e = threadIdx.x; e < R * GM_PAD; e += GM_THREADS) dst[(e / GM_PAD) * dst_stride + width + (e % GM_PAD)] = 0.0f;
}

// count words from global src to shared dst by every thread of the block, each thread's
// loads issued before its stores (one round trip to L2 for a layer of a few thousand words,
// not one per word)
__device__ __forceinline__ void gm_copy_words(int* __restrict__ dst, const int* __restrict__ src, int count) {
    const bool vector = ((reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(dst)) & 15) == 0 && (count & 3) == 0;
    if (vector) {
        const int4* s4 = reinterpret_cast<const int4*>(src);
        int4* d4 = reinterpret_cast<int4*>(dst);
        int e = threadIdx.x;
        for (; e + GM_THREADS < count / 4; e += 2 * GM_THREADS) {
            const int4 v0 = __ldg(s4 + e), v1 = __ldg(s4 + e + GM_THREADS);
            d4[e] = v0;
            d4[e + GM_THREADS] = v1;
        }
        for (; e < count / 4; e += GM_THREADS) d4[e] = __ldg(s4 + e);
        return;
    }
    for (int e = threadIdx.x; e < count; e += GM_THREADS) dst[e] = __ldg(src + e);
}

// count indices from device memory (GmIndex) to shared ints, as gm_copy_words
__device__ __forceinline__ void gm_copy_index(int* __restrict__ dst, const GmIndex* __restrict__ src, int count) {
#ifdef GM_INDEX16
    if ((reinterpret_cast<size_t>(src) & 15) == 0 && (count & 7) == 0) {  // eight indices a 16-byte load
        const uint4* s8 = reinterpret_cast<const uint4*>(src);
        for (int e = threadIdx.x; e < count / 8; e += GM_THREADS) {
            const uint4 v = __ldg(s8 + e);
            const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                dst[8 * e + 2 * j] = (int)(words[j] & 0xffffu);
                dst[8 * e + 2 * j + 1] = (int)(words[j] >> 16);
            }
        }
        return;
    }
    for (int e = threadIdx.x; e < count; e += GM_THREADS) dst[e] = (int)__ldg(src + e);
#else
    gm_copy_words(dst, src, count);
#endif
}

// Layer l's indices, then its weights (when not uniform), then its column sizes, into
// `stage` if they fit its `words`; returns whether they were staged. Called by every thread;
// the caller synchronizes.
__device__ __forceinline__ bool gm_stage_layer(int* __restrict__ stage, int words, int l,
                                               const unsigned long long* __restrict__ w_idx_ptrs,
                                               const unsigned long long* __restrict__ w_val_ptrs,
                                               const unsigned long long* __restrict__ size_ptrs,
                                               const int* __restrict__ ks, const int* __restrict__ widths) {
    const int width = widths[l], count = ks[l] * width;
    const int* w_val = reinterpret_cast<const int*>(w_val_ptrs[l]);
    const int weights = w_val ? count : 0;
    if (count + weights + width > words) return false;
    gm_copy_index(stage, reinterpret_cast<const GmIndex*>(w_idx_ptrs[l]), count);
    if (w_val) gm_copy_words(stage + count, w_val, count);
    gm_copy_words(stage + count + weights, reinterpret_cast<const int*>(size_ptrs[l]), width);
    return true;
}

// The monitor's counts of rows first_row, first_row + row_step, ... (< rows) into dst[r *
// tiles + c], from their non-zero merged columns (bits, MW words per row) and the masks (see
// the header): count of 32-column tile c = sum over levels of popc(bits & the groups that
// appear in c at least level + 1 times). A lane per tile, the row's bits a broadcast read.
// BY_LANE: built with the common case's path (one level, a tile a lane: networks of up to
// 1024 neurons, whose tiles are tall; the wide networks' short-tile instances keep their
// registers without it)
template <bool BY_LANE>
__device__ __forceinline__ void gm_tile_counts(const unsigned* __restrict__ nz_mask, int MW, const unsigned* __restrict__ masks,
                                               int levels, int words, int tiles, int rows, int first_row, int row_step,
                                               unsigned char* __restrict__ dst) {
    const int lane = threadIdx.x & 31;
    if (BY_LANE && levels == 1 && words <= 2 && tiles <= 32) {  // the common case: a tile a lane, one level
        if (lane >= tiles) return;
        const unsigned* const mine = masks + lane * words;
        for (int r = first_row; r < rows; r += row_step)
            dst[r * tiles + lane] =
                (unsigned char)(__popc(nz_mask[r * MW] & __ldg(mine)) + (words > 1 ? __popc(nz_mask[r * MW + 1] & __ldg(mine + 1)) : 0));
        return;
    }
    for (int r = first_row; r < rows; r += row_step)
        for (int c = lane; c < tiles; c += 32) {
            int lit = 0;
            for (int level = 0; level < levels; ++level)
                for (int w = 0; w < words; ++w) lit += __popc(nz_mask[r * MW + w] & __ldg(masks + ((size_t)level * tiles + c) * words + w));
            dst[r * tiles + c] = (unsigned char)lit;
        }
}

// Counts path (see pixel_columns): one lit input of a row whose counts start at `row_counts`;
// `columns` holds the merged columns it feeds as its halves, 0xffff for none.
__device__ __forceinline__ void gm_count_pixel(unsigned* __restrict__ row_counts, unsigned columns) {
    const unsigned low = columns & 0xffffu, high = columns >> 16;
    if (low != 0xffffu) atomicAdd(row_counts + low, 1u);
    if (high != 0xffffu) atomicAdd(row_counts + high, 1u);
}

template <int R, bool BITS>
__global__ void __launch_bounds__(GM_THREADS, GM_MIN_BLOCKS)
gc_merged(const int* __restrict__ csr_ptr, const int* __restrict__ csr_idx, const float* __restrict__ csr_val,
          const float* __restrict__ y_dense, const float* __restrict__ y_in, const int* __restrict__ ids_in,
          float* __restrict__ y_out, int* __restrict__ ids_out,
          const unsigned long long* __restrict__ w_idx_ptrs, const unsigned long long* __restrict__ w_val_ptrs,
          const float* __restrict__ w_uniforms, const int* __restrict__ ks, const int* __restrict__ widths,
          const unsigned long long* __restrict__ size_ptrs, const unsigned long long* __restrict__ group_ptrs,
          int* __restrict__ counts, unsigned long long* __restrict__ nnz_counts, int layer, int layer_count,
          unsigned char* __restrict__ tile_nnz, int* __restrict__ row_nnz, int* __restrict__ row_layers,
          const unsigned long long* __restrict__ mask_ptrs, const int* __restrict__ mask_levels,
          int n, int stride, int stage_words, float bias, float clamp, float input_value,
          const unsigned* __restrict__ pixel_columns, int count_words, int split_round_rows, int split_tail_rows,
          int split_part) {
    extern __shared__ float smem[];
    const bool first_launch = GM_FIRST_LAUNCHES && layer == 0;
    const bool tile_input = first_launch && !y_dense;  // n-wide input rows in shared memory
    // BITS: the tile holds bits (see the header), an instance of its own so that the other
    // launches keep their registers
#define GM_TILE_BITS (BITS && tile_input)
#define GM_BIT_WORDS (n / 32 + 1)  // a row of bits, with a zero word for padding steps
    // counts of lit inputs per merged column instead of bits (see pixel_columns)
    const bool counts_input = GM_TILE_BITS && pixel_columns;
    const int input_words = counts_input ? count_words : GM_BIT_WORDS;  // a row of the input tile
    const int S = stride + GM_PAD;  // row stride of the two Z buffers
    // first launch only: R x (n + 32) floats, or R x (n / 32 + 1) words of bits or R x
    // count_words counts, rounded up to keep the buffers 16-byte aligned
    float* input_tile = smem;
    unsigned* const input_bits = reinterpret_cast<unsigned*>(smem);
    float* const buffers = smem + (!tile_input ? 0 : GM_TILE_BITS ? (R * input_words + 3) & ~3 : R * (n + GM_PAD));  // two of R x S
    // a layer's indices, weights and column sizes staged here when they fit: every tile reads
    // them K times
    int* const stage = reinterpret_cast<int*>(buffers + 2 * R * S);
    // each row's non-zero merged columns as bits (R x MW words), written by every layer
    const int MW = stride / 32;
    unsigned* const nz_mask = reinterpret_cast<unsigned*>(stage + stage_words);
    __shared__ int s_row_count[R];
    __shared__ int s_final_count[R];
    __shared__ int s_rank[R];
    __shared__ int s_ptr[R + 1];
    __shared__ int s_base;
    __shared__ int s_any;
    __shared__ float s_chain[GM_COUNT_MAX + 1];  // counts path: the sum of c lit inputs
#if GM_PIXELS_SHARED && GM_FIRST_LAUNCHES
    // counts path: pixel_columns (read after the first tile's barrier); the host builds this
    // variant only for networks of at most GM_PIXELS_MAX neurons
    __shared__ unsigned s_pixels[GM_PIXELS_MAX];
    if (counts_input)
        for (int e = threadIdx.x; e < min(n, GM_PIXELS_MAX); e += GM_THREADS) s_pixels[e] = __ldg(pixel_columns + e);
#define GM_PIXEL(i) s_pixels[i]
#else
#define GM_PIXEL(i) __ldg(pixel_columns + (i))
#endif
    if (counts_input && threadIdx.x <= ks[0]) {  // (read after the first tile's barrier)
        float acc = 0.0f;
        for (int c = 0; c < threadIdx.x; ++c) acc = fmaf(w_uniforms[0], input_value, acc);
        s_chain[threadIdx.x] = acc;
    }

    // the rows this launch takes (see split_part in the header): all the live rows, or the
    // head or tail of a split launch
    const int live_rows = counts[layer];
    int row_begin = 0, row_end = live_rows;
    if (split_part) {
        const int full = live_rows / split_round_rows * split_round_rows;
        const int cut = live_rows - full <= split_tail_rows ? full : live_rows;
        if (split_part == 1) row_end = cut;
        else row_begin = cut;
    }
    const int n_tiles = (row_end - row_begin + R - 1) / R;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int last = layer + layer_count - 1;

    // with masks for the launch's last layer, warps 1.. work out the monitor's counts while
    // warp 0 counts that layer's rows (the host gives masks only when R x n / 32 bytes of
    // counts fit the stage): into the first launch's input tile, dead by then, else into the
    // stage, free by then
    const unsigned* const masks = reinterpret_cast<const unsigned*>(mask_ptrs[last]);
    const bool counts_in_stage = tile_nnz && masks;
    unsigned char* const tile_counts = reinterpret_cast<unsigned char*>(tile_input ? input_tile : reinterpret_cast<float*>(stage));
    // the layer the stage holds (-1: none; uniform across the block): a one-layer launch
    // stages its layer once for all its tiles
    int staged_layer = -1;

    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        const int first = row_begin + t * R;
        const int valid_rows = min(R, row_end - first);
        if (threadIdx.x < R) s_row_count[threadIdx.x] = 0;
        if (staged_layer != layer)
            staged_layer = gm_stage_layer(stage, stage_words, layer, w_idx_ptrs, w_val_ptrs, size_ptrs, ks, widths) ? layer : -1;
        // 1. load the tile; rows past the end are zero
        if (tile_input) {
            if (threadIdx.x <= valid_rows) s_ptr[threadIdx.x] = __ldg(csr_ptr + first + threadIdx.x);
            if (GM_TILE_BITS) {
                for (int e = threadIdx.x; e < R * input_words; e += GM_THREADS) input_bits[e] = 0u;
            } else {
                float4* tile4 = reinterpret_cast<float4*>(input_tile);
                for (int e = threadIdx.x; e < R * (n + GM_PAD) / 4; e += GM_THREADS) tile4[e] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
            __syncthreads();
#if GM_SCATTER_AT_ONCE
            if constexpr (R >= 8) {  // a warp's RW rows at once, four loads a row in flight a lane
                constexpr int WARPS = GM_THREADS / 32;
                constexpr int RW = (R + WARPS - 1) / WARPS;
                // a row's range is read from s_ptr where needed (registers: the launch bound's 64)
#define GM_ROW_BEGIN(q) (warp + (q) * WARPS < valid_rows ? s_ptr[warp + (q) * WARPS] : 0)
#define GM_ROW_COUNT(q) (warp + (q) * WARPS < valid_rows ? s_ptr[warp + (q) * WARPS + 1] - s_ptr[warp + (q) * WARPS] : 0)
                int longest = 0;
#pragma unroll
                for (int q = 0; q < RW; ++q) longest = max(longest, GM_ROW_COUNT(q));
                constexpr int J = GM_SCATTER_LOADS;
                for (int off = 0; off < longest; off += J * 32) {  // (uniform across the warp)
                    int idx[RW][J];
                    float val[RW][J];
#pragma unroll
                    for (int q = 0; q < RW; ++q)
#pragma unroll
                        for (int j = 0; j < J; ++j) {
                            const int at = off + j * 32 + lane;
                            const bool ok = at < GM_ROW_COUNT(q);
                            idx[q][j] = ok ? __ldg(csr_idx + GM_ROW_BEGIN(q) + at) : 0;
                            val[q][j] = GM_TILE_BITS || !ok ? input_value : __ldg(csr_val + GM_ROW_BEGIN(q) + at);
                        }
                    if (counts_input) {  // each pixel's merged columns, in place of the pixel
#pragma unroll
                        for (int q = 0; q < RW; ++q)
#pragma unroll
                            for (int j = 0; j < J; ++j)
                                if (off + j * 32 + lane < GM_ROW_COUNT(q)) idx[q][j] = (int)GM_PIXEL(idx[q][j]);
                    }
#pragma unroll
                    for (int q = 0; q < RW; ++q) {
                        const int r = warp + q * WARPS;
#pragma unroll
                        for (int j = 0; j < J; ++j) {
                            if (off + j * 32 + lane < GM_ROW_COUNT(q)) {
                                if (counts_input) gm_count_pixel(input_bits + r * input_words, (unsigned)idx[q][j]);
                                else if (GM_TILE_BITS) atomicOr(input_bits + r * GM_BIT_WORDS + (idx[q][j] >> 5), 1u << (idx[q][j] & 31));
                                else input_tile[r * (n + GM_PAD) + idx[q][j]] = val[q][j];
                            }
                        }
                    }
                }
#undef GM_ROW_BEGIN
#undef GM_ROW_COUNT
            } else
#endif
            if constexpr (R >= 8) {  // a warp per row, four loads in flight a lane (~100 pixels: one round trip)
                for (int r = warp; r < valid_rows; r += GM_THREADS / 32) {
                    const int end = s_ptr[r + 1];
                    for (int e0 = s_ptr[r] + lane; e0 < end; e0 += 4 * 32) {
                        int idx[4];
                        float val[4];
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            const int e = min(e0 + j * 32, end - 1);
                            idx[j] = __ldg(csr_idx + e);
                            val[j] = GM_TILE_BITS ? input_value : __ldg(csr_val + e);
                        }
                        if (counts_input) {  // each pixel's merged columns, in place of the pixel
#pragma unroll
                            for (int j = 0; j < 4; ++j) idx[j] = (int)GM_PIXEL(idx[j]);
                        }
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            if (e0 + j * 32 < end) {
                                if (counts_input) gm_count_pixel(input_bits + r * input_words, (unsigned)idx[j]);
                                else if (GM_TILE_BITS) atomicOr(input_bits + r * GM_BIT_WORDS + (idx[j] >> 5), 1u << (idx[j] & 31));
                                else input_tile[r * (n + GM_PAD) + idx[j]] = val[j];
                            }
                        }
                    }
                }
            } else {  // few wide rows: the tile's contiguous CSR range shared by every thread,
                      // each entry's row found in the row pointers
                const int begin = s_ptr[0], end = s_ptr[valid_rows];
                int r = 0;
                for (int e0 = begin + threadIdx.x; e0 < end; e0 += 4 * GM_THREADS) {
                    int idx[4];
                    float val[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int e = min(e0 + j * GM_THREADS, end - 1);
                        idx[j] = __ldg(csr_idx + e);
                        val[j] = GM_TILE_BITS ? input_value : __ldg(csr_val + e);
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int e = e0 + j * GM_THREADS;
                        if (e < end) {
                            while (s_ptr[r + 1] <= e) ++r;
                            if (counts_input)
                                gm_count_pixel(input_bits + r * input_words, GM_PIXEL(idx[j]));
                            else if (GM_TILE_BITS) atomicOr(input_bits + r * GM_BIT_WORDS + (idx[j] >> 5), 1u << (idx[j] & 31));
                            else input_tile[r * (n + GM_PAD) + idx[j]] = val[j];
                        }
                    }
                }
            }
        } else if (!first_launch) {
            const int width_in = widths[layer - 1];
            for (int e = threadIdx.x; e < R * S; e += GM_THREADS) {
                const int r = e / S, c = e - r * S;
                buffers[e] = (r < valid_rows && c < width_in) ? __ldg(y_in + (size_t)(first + r) * stride + c) : 0.0f;
            }
        }
        __syncthreads();

        // 2. the launch's layers, ping-ponging between the two buffers
        int cur = -1;  // buffer holding the current input; -1: the input tile or y_dense
        if (!first_launch) cur = 0;
        for (int l = layer; l <= last; ++l) {
            const int width = widths[l];
            const int k = ks[l];
            const bool staged = staged_layer == l;
            const GmIndex* w_idx = reinterpret_cast<const GmIndex*>(w_idx_ptrs[l]);
            const float* w_val = reinterpret_cast<const float*>(w_val_ptrs[l]);
            const int* sizes = staged ? stage + k * width * (w_val ? 2 : 1) : reinterpret_cast<const int*>(size_ptrs[l]);
            const int out = cur == 0 ? 1 : 0;
            if (!GM_FIRST_LAUNCHES || cur >= 0)
                gm_layer<R, GM_SHARED>(buffers + cur * R * S, S, widths[l - 1], valid_rows, buffers + out * R * S, S, width, staged,
                                       stage, w_idx, w_val, w_uniforms[l], k, sizes, bias, clamp, s_row_count, nz_mask, MW, 0.0f);
            else if (counts_input)
                gm_layer<R, GM_COUNTS>(input_tile, count_words, n, valid_rows, buffers + out * R * S, S, width, staged, stage, w_idx,
                                       w_val, w_uniforms[l], k, sizes, bias, clamp, s_row_count, nz_mask, MW, input_value, s_chain);
            else if (GM_TILE_BITS)
                gm_layer<R, GM_BITS>(input_tile, GM_BIT_WORDS, n, valid_rows, buffers + out * R * S, S, width, staged, stage, w_idx,
                                     w_val, w_uniforms[l], k, sizes, bias, clamp, s_row_count, nz_mask, MW, input_value);
            else if (tile_input)
                gm_layer<R, GM_SHARED>(input_tile, n + GM_PAD, n, valid_rows, buffers + out * R * S, S, width, staged, stage, w_idx,
                                       w_val, w_uniforms[l], k, sizes, bias, clamp, s_row_count, nz_mask, MW, 0.0f);
            else
                gm_layer<R, GM_GLOBAL>(y_dense + (size_t)first * n, n, n, valid_rows, buffers + out * R * S, S, width, staged, stage,
                                       w_idx, w_val, w_uniforms[l], k, sizes, bias, clamp, s_row_count, nz_mask, MW, 0.0f);
            cur = out;
            __syncthreads();

            // per-layer counts; at the launch's last layer the count also allocates positions
            if (warp == 0) {
                const int row_count = lane < R ? s_row_count[lane] : 0;
                const bool live = lane < valid_rows && row_count > 0;
                const unsigned mask = __ballot_sync(0xffffffffu, live);
                if (l == last && lane < R) {
                    s_rank[lane] = live ? __popc(mask & ((1u << lane) - 1u)) : -1;
                    s_final_count[lane] = row_count;
                }
                const int tile_sum = __reduce_add_sync(0xffffffffu, live ? row_count : 0);
                if (lane < R) s_row_count[lane] = 0;
                if (lane == 0) {
                    const int n_live = __popc(mask);
                    if (l == last) s_base = n_live ? atomicAdd(&counts[l + 1], n_live) : 0;
                    else if (n_live) atomicAdd(&counts[l + 1], n_live);  // result unused: no wait
                    if (tile_sum) atomicAdd(&nnz_counts[l + 1], (unsigned long long)tile_sum);
                    if (row_layers) atomicAdd(&row_layers[l], R);
                    s_any = n_live;
                }
            }
            // meanwhile the other warps stage the next layer (the stage is no longer read), or,
            // after the launch's last layer, work out the monitor's counts
            if (l < last) {
                staged_layer = gm_stage_layer(stage, stage_words, l + 1, w_idx_ptrs, w_val_ptrs, size_ptrs, ks, widths) ? l + 1 : -1;
            } else if (counts_in_stage) {
                if (!tile_input) staged_layer = -1;
                if (warp > 0)
                    gm_tile_counts<(R >= 8)>(nz_mask, MW, masks, mask_levels[last], width / 32, n / 32, valid_rows, warp - 1,
                                   GM_THREADS / 32 - 1, tile_counts);
            }
            __syncthreads();
            if (!s_any) break;  // every row of the tile is dead: later layers add nothing
        }
        if (!s_any) continue;  // (uniform across the block)

        // 3. copy the live rows out, with their ids and (monitor) per-32-column counts of Y
        const int width = widths[last];
        const float* z = buffers + cur * R * S;
        for (int e = threadIdx.x; e < R * (width / 4); e += GM_THREADS) {
            const int r = e / (width / 4), c = e - r * (width / 4);
            if (s_rank[r] < 0) continue;
            const size_t dst_row = (size_t)s_base + s_rank[r];
            reinterpret_cast<float4*>(y_out + dst_row * stride)[c] = reinterpret_cast<const float4*>(z + r * S)[c];
        }
        if (threadIdx.x < valid_rows && s_rank[threadIdx.x] >= 0) {
            const size_t dst_row = (size_t)s_base + s_rank[threadIdx.x];
            ids_out[dst_row] = first_launch ? first + threadIdx.x : ids_in[first + threadIdx.x];
            if (row_nnz) row_nnz[dst_row] = s_final_count[threadIdx.x];
        }
        if (counts_in_stage) {  // worked out during the last layer's count: copy them out
            const int tiles = n / 32;
            // 16 bytes a thread, a warp's store 512 bytes where a byte a lane stored 32: built for the
            // 32-row tiles only (the 1024-neuron first launch, 57 -> 54-55 us on an H200; with it in the
            // 16-row instances too, generated 4096 x 120 ran 1% slower in two pairs of runs)
            if (R >= 32 && (tiles & 15) == 0) {
                const int chunks = tiles / 16;
                for (int e = threadIdx.x; e < R * chunks; e += GM_THREADS) {
                    const int r = e / chunks, c = e - r * chunks;
                    if (s_rank[r] < 0) continue;
                    reinterpret_cast<uint4*>(tile_nnz + ((size_t)s_base + s_rank[r]) * tiles)[c] =
                        reinterpret_cast<const uint4*>(tile_counts + r * tiles)[c];
                }
            } else {
                for (int r = warp; r < R; r += GM_THREADS / 32) {
                    if (s_rank[r] < 0) continue;  // (uniform across the warp)
                    unsigned char* out = tile_nnz + ((size_t)s_base + s_rank[r]) * tiles;
                    for (int c = lane; c < tiles; c += 32) out[c] = tile_counts[r * tiles + c];
                }
            }
        } else if (tile_nnz) {  // a warp per (row, 32-column tile): lane j looks up column j's group
            const int* groups = reinterpret_cast<const int*>(group_ptrs[last]);
            if (n <= stage_words) {  // the stage is free now: the groups go there
                for (int e = threadIdx.x; e < n; e += GM_THREADS) stage[e] = __ldg(groups + e);
                groups = stage;
                staged_layer = -1;
            }
            __syncthreads();
            const int tiles = n / 32;
            constexpr int WARPS = GM_THREADS / 32;
            for (int e0 = warp; e0 < R * tiles; e0 += 4 * WARPS) {
                int g[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {  // four independent lookups in flight
                    const int e = min(e0 + j * WARPS, R * tiles - 1);
                    g[j] = groups[(e % tiles) * 32 + lane];
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = e0 + j * WARPS;
                    const int r = e / tiles, c = e - r * tiles;
                    if (e < R * tiles && s_rank[r] >= 0) {  // (uniform across the warp)
                        const unsigned lit = __ballot_sync(0xffffffffu, z[r * S + g[j]] != 0.0f);
                        if (lane == 0) tile_nnz[((size_t)s_base + s_rank[r]) * tiles + c] = (unsigned char)__popc(lit);
                    }
                }
            }
        }
        __syncthreads();  // the buffers are reused by the next tile
    }
}

#undef GM_TILE_BITS
#undef GM_BIT_WORDS
#undef GM_PIXEL

// The input rows expanded to dense (rows x n, zeroed beforehand), for networks too wide for
// an n-wide tile in shared memory. A warp per row.
extern "C" __global__ void gm_scatter_rows(const int* __restrict__ csr_ptr, const int* __restrict__ csr_idx,
                                           const float* __restrict__ csr_val, int rows, int n, float* __restrict__ dense) {
    const int lane = threadIdx.x & 31;
    for (int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < rows; row += (gridDim.x * blockDim.x) >> 5)
        for (int e = csr_ptr[row] + lane; e < csr_ptr[row + 1]; e += 32) dense[(size_t)row * n + csr_idx[e]] = csr_val[e];
}

// The final live rows back to n-wide: y[r, j] = z[r, groups[j]], for the *count rows. A block
// takes a row at a time, a thread four adjacent columns (one 16-byte load of their groups, one
// 16-byte store): the row of z is read from device memory once and gathered from L1, and no
// element needs a division (an element a thread with a 64-bit division each ran at 650-800
// GB/s at 65536 neurons). n is a multiple of 32.
extern "C" __global__ void gm_expand_rows(const float* __restrict__ z, int stride, const int* __restrict__ groups, int n,
                                          const int* __restrict__ count, float* __restrict__ y) {
    const int rows = count[0];
    const int4* const groups4 = reinterpret_cast<const int4*>(groups);
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* const zr = z + (size_t)r * stride;
        float4* const yr = reinterpret_cast<float4*>(y + (size_t)r * n);
        for (int c = threadIdx.x; c < n / 4; c += blockDim.x) {
            const int4 g = __ldg(groups4 + c);
            yr[c] = make_float4(__ldg(zr + g.x), __ldg(zr + g.y), __ldg(zr + g.z), __ldg(zr + g.w));
        }
    }
}

#ifndef GM_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define GC_MERGED_INSTANCE(R, BITS)                                                                                    \
    template __global__ void gc_merged<R, BITS>(const int*, const int*, const float*, const float*, const float*, const int*, \
                                          float*, int*, const unsigned long long*, const unsigned long long*,        \
                                          const float*, const int*, const int*, const unsigned long long*,           \
                                          const unsigned long long*, int*, unsigned long long*, int, int,            \
                                          unsigned char*, int*, int*, const unsigned long long*, const int*, int, int, int, \
                                          float, float, float, const unsigned*, int, int, int, int);
#ifndef GM_LATER  // the later module runs tiles of two rows or more, and no first launch
GC_MERGED_INSTANCE(1, false)
#endif
GC_MERGED_INSTANCE(2, false)
GC_MERGED_INSTANCE(4, false)
GC_MERGED_INSTANCE(8, false)
GC_MERGED_INSTANCE(16, false)
GC_MERGED_INSTANCE(32, false)
#ifndef GM_LATER
GC_MERGED_INSTANCE(1, true)
GC_MERGED_INSTANCE(2, true)
GC_MERGED_INSTANCE(4, true)
GC_MERGED_INSTANCE(8, true)
GC_MERGED_INSTANCE(16, true)
GC_MERGED_INSTANCE(32, true)
#endif
#endif
