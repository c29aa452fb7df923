// Tile-sparse GEMM: C = A @ W for a row-major activation matrix A [M x K] whose zero tiles
// are skipped, and a dense row-major weight W [K x N]. Compiled at run time by CuPy.
//
// The tile list is CSR over row blocks of BM rows: row block rb multiplies the k-tiles
// k_tiles[row_ptr[rb] .. row_ptr[rb + 1]) of TK columns each (TK a multiple of BK); any
// other part of its rows is zero and is never read. A row block with no tiles writes zeros.
// The *_counts kernels take the monitor's per-tile counts instead (counts[rb * (K / TK) + j]
// for tile (rb, j) of BM x TK) and list each row block's non-zero tiles themselves, in the
// same launch: tile_gemm_f32_counts per output block into shared memory,
// tile_gemm_f32_balanced_counts for all row blocks before a grid barrier.
// Requirements (checked by the Python wrapper): K % TK == 0, N % BN == 0, pointers 16-byte
// aligned; M is free (rows past M read as zero and are not stored).
// AT (FP32 tile-list kernels only): A is given as its transpose, [K x M] row-major, for the
// weight gradient X^T dY of a training step; the tiles still describe the logical A [M x K]
// (BM of X's columns by TK of its rows). Then M % 4 == 0 as well.
//
// tile_gemm_f32: FP32 on the CUDA cores. Each thread computes an 8 x 8 patch split in four
// 4 x 4 quarters (rows ty*4 + {0..3} and BM/2 + ty*4 + {0..3}, the same for columns) so
// that its float4 shared-memory reads are free of bank conflicts. A is stored transposed in
// shared memory; while the current step computes, the next step's A is prefetched into
// registers and its W copied into the other shared buffer (cp.async; one barrier per step).
//
// tile_gemm_tf32<BM, BN>: TF32 tensor cores through PTX mma.sync.m16n8k8 (NVRTC builds without
// <mma.h>), BM / 32 x 2 warps, each a 32 x BN/2 patch (2 x BN/16 fragments of 16 x 8), K
// taken 32 columns a step (BK = 32). Both operands are copied raw (FP32) by cp.async
// into a TC_STAGES-deep ring of shared tiles, so the copies of the next steps run under this
// step's products; they are rounded to TF32 (cvt.rna: to nearest, ties away) as the fragments
// are read; accumulation in FP32. Shared rows are padded so fragment loads hit 32 different
// banks.

// One BK-deep step of the FP32 kernels: W's rows go straight to shared memory (cp.async,
// no registers held), A's through registers, stored transposed for the 8 x 8 patch products.
template <int BM, int BN, int BK, bool AT = false>
struct F32Step {
    static constexpr int THREADS = (BM / 8) * (BN / 8);
    static constexpr int A_VEC = BM * BK / 4 / THREADS;  // float4 of A per thread per step
    static constexpr int W_VEC = BK * BN / 4 / THREADS;
    static_assert(A_VEC >= 1 && W_VEC >= 1, "tile too small for the block");
    float4 a[A_VEC];

    // A's step into registers; W's step copied into Ws (which no thread may be reading).
    // AT: A holds the transpose, [K x M] row-major, so a step is BK of its rows, BM floats each.
    __device__ __forceinline__ void load(const float* __restrict__ A, const float* __restrict__ W, int M, int N, int K,
                                         int m0, int n0, int k0, float (*Ws)[BN], int tid) {
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            if constexpr (AT) {
                const int e = tid + v * THREADS, row = e / (BM / 4), c4 = e % (BM / 4);
                a[v] = (m0 + c4 * 4 < M) ? *reinterpret_cast<const float4*>(A + (size_t)(k0 + row) * M + m0 + c4 * 4)
                                         : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const int e = tid + v * THREADS, row = e / (BK / 4), c4 = e % (BK / 4);
                a[v] = (m0 + row < M) ? *reinterpret_cast<const float4*>(A + (size_t)(m0 + row) * K + k0 + c4 * 4)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int v = 0; v < W_VEC; ++v) {
            const int e = tid + v * THREADS, row = e / (BN / 4), c4 = e % (BN / 4);
            const float* src = W + (size_t)(k0 + row) * N + n0 + c4 * 4;
#if __CUDA_ARCH__ >= 800
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&Ws[row][c4 * 4]));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#else
            *reinterpret_cast<float4*>(&Ws[row][c4 * 4]) = *reinterpret_cast<const float4*>(src);
#endif
        }
    }

    // A's registers into As; waits for this thread's copies of W (a barrier must follow)
    __device__ __forceinline__ void store(float (*As)[BM], int tid) const {
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            if constexpr (AT) {  // already k-major: a straight vector store
                const int e = tid + v * THREADS, row = e / (BM / 4), c4 = e % (BM / 4);
                *reinterpret_cast<float4*>(&As[row][c4 * 4]) = a[v];
            } else {
                const int e = tid + v * THREADS, row = e / (BK / 4), c4 = e % (BK / 4);
                As[c4 * 4 + 0][row] = a[v].x;
                As[c4 * 4 + 1][row] = a[v].y;
                As[c4 * 4 + 2][row] = a[v].z;
                As[c4 * 4 + 3][row] = a[v].w;
            }
        }
#if __CUDA_ARCH__ >= 800
        asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    }
};

// Blocks per SM an FP32 instance is built for (its launch bounds cap the registers to fit
// them): 2 for 128 x 128 (128 registers a thread: the 8 x 8 patch and the pipeline), 3 for
// the smaller ones (without the bound the balanced 64 x 128 takes 178 registers and fits 2
// blocks of 4 warps). Mirrored by f32_blocks_per_sm in spartan_py/sparsity/gpu_kernels.py.
constexpr int f32_min_blocks(int bm, int bn) { return bm * bn >= 128 * 128 ? 2 : 3; }

template <int BM, int BN, int BK>
__device__ __forceinline__ void f32_multiply(const float (*As)[BM], const float (*Ws)[BN], float (&acc)[8][8], int tx, int ty) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        float a[8], w[8];
        *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
        *reinterpret_cast<float4*>(a + 4) = *reinterpret_cast<const float4*>(&As[kk][BM / 2 + ty * 4]);
        *reinterpret_cast<float4*>(w) = *reinterpret_cast<const float4*>(&Ws[kk][tx * 4]);
        *reinterpret_cast<float4*>(w + 4) = *reinterpret_cast<const float4*>(&Ws[kk][BN / 2 + tx * 4]);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
    }
}

__device__ __forceinline__ void f32_clear(float (&acc)[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
}

template <int BM, int BN>
__device__ __forceinline__ void f32_write_patch(float* __restrict__ C, const float (&acc)[8][8], int M, int N, int m0, int n0,
                                                int tx, int ty) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
        if (row >= M) continue;
        float* out = C + (size_t)row * N + n0;
        *reinterpret_cast<float4*>(out + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(out + BN / 2 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

// One output block (row block blockIdx.y, column block blockIdx.x) of the tiles schedule:
// its row block's k-tiles are tiles[0 .. count) (global or shared memory).
template <int BM, int BN, int BK, bool AT = false>
__device__ __forceinline__ void f32_output_block(const float* __restrict__ A, const float* __restrict__ W,
                                                 float* __restrict__ C, int M, int N, int K, const int* tiles, int count,
                                                 int TK) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Ws[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / 8), ty = tid / (BN / 8);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int sub_steps = TK / BK;
    const int steps = count * sub_steps;
    // the next step's k: its tile in the list and the step within that tile (no division per step)
    const int* tile_at = tiles;
    int k_sub = 0;
    auto k_next = [&]() {
        const int k0 = *tile_at * TK + k_sub * BK;
        if (++k_sub == sub_steps) { k_sub = 0; ++tile_at; }
        return k0;
    };

    float acc[8][8];
    f32_clear(acc);
    F32Step<BM, BN, BK, AT> next;
    if (steps > 0) {
        next.load(A, W, M, N, K, m0, n0, k_next(), Ws[0], tid);
        next.store(As[0], tid);
        __syncthreads();
    }
    for (int s = 0; s < steps; ++s) {
        const int buf = s & 1;
        if (s + 1 < steps) next.load(A, W, M, N, K, m0, n0, k_next(), Ws[buf ^ 1], tid);
        f32_multiply<BM, BN, BK>(As[buf], Ws[buf], acc, tx, ty);
        if (s + 1 < steps) next.store(As[buf ^ 1], tid);
        __syncthreads();
    }
    f32_write_patch<BM, BN>(C, acc, M, N, m0, n0, tx, ty);
}

template <int BM, int BN, int BK, bool AT = false>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), f32_min_blocks(BM, BN)) tile_gemm_f32(
    const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int M, int N, int K,
    const int* __restrict__ row_ptr, const int* __restrict__ k_tiles, int TK) {
    const int first = row_ptr[blockIdx.y];
    f32_output_block<BM, BN, BK, AT>(A, W, C, M, N, K, k_tiles + first, row_ptr[blockIdx.y + 1] - first, TK);
}

// The tile list built inside the GEMM from the monitor's counts (no list launch before it).
// counts[rb * (K / TK) + j] are the non-zeros of A's tile (rb, j) of BM x TK: row block rb's
// non-zero tiles, in order, are found by a block-wide ballot and written to list; returns
// how many. Every thread of the block calls it (it ends with a barrier).
#define COUNTS_MAX_K_TILES 1024      // the tiles schedule's list in shared memory (K <= 1024 TK)
#define COUNTS_MAX_ROW_BLOCKS 2048   // the balanced schedule's row pointers in shared memory

template <int THREADS>
__device__ __forceinline__ int block_list_tiles(const int* __restrict__ counts_row, int k_tiles, int* list) {
    constexpr int WARPS = (THREADS + 31) / 32;
    constexpr unsigned LANES = THREADS >= 32 ? 0xffffffffu : (1u << THREADS) - 1u;
    __shared__ int warp_live[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int listed = 0;
    for (int base = 0; base < k_tiles; base += THREADS) {
        const int j = base + tid;
        const bool live = j < k_tiles && counts_row[j] > 0;
        const unsigned mask = __ballot_sync(LANES, live);
        if (lane == 0) warp_live[warp] = __popc(mask);
        __syncthreads();
        int before = listed, after = listed;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            before += w < warp ? warp_live[w] : 0;
            after += warp_live[w];
        }
        if (live) list[before + __popc(mask & ((1u << lane) - 1u))] = j;
        listed = after;
        __syncthreads();  // warp_live is written again; the list is complete
    }
    return listed;
}

template <int BM, int BN, int BK>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), f32_min_blocks(BM, BN)) tile_gemm_f32_counts(
    const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int M, int N, int K,
    const int* __restrict__ counts, int TK) {
    __shared__ int list[COUNTS_MAX_K_TILES];
    const int k_tiles = K / TK;
    const int count = block_list_tiles<(BM / 8) * (BN / 8)>(counts + (size_t)blockIdx.y * k_tiles, k_tiles, list);
    f32_output_block<BM, BN, BK>(A, W, C, M, N, K, list, count, TK);
}

// tile_gemm_f32_balanced: the same product with the work split evenly over a grid that fits
// the GPU at once (stream-K). The steps of all (row block, column block) outputs, in row-block
// order, form one sequence; block b of P takes steps [total * b / P, total * (b + 1) / P),
// where P is the grid or fewer, so that each block has at least min_steps (the step count
// is read on the device: the host needs no round trip).
// An output whose steps two or more blocks share is finished by the block holding its first
// step: the others leave their partial sums in partial[b] and raise flags[b], which it waits
// for, adds and lowers again (so flags are all zero between launches). Waiting is safe
// because every block is resident (the host caps P at the occupancy) and a block writes its
// partial before it waits for anyone. Row blocks without tiles are written as zeros.
struct StepCursor {  // where a step lies: row block, column block, step within the output
    int rb, cb, s;
};

__device__ __forceinline__ StepCursor locate_step(int i, const int* row_ptr, int row_blocks, int sub, int ncb) {
    const int tile = i / (sub * ncb);  // index of the step's tile in the list
    int lo = 0, hi = row_blocks - 1;                    // last row block starting at or before it
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (row_ptr[mid] <= tile) lo = mid; else hi = mid - 1;
    }
    const int steps = (row_ptr[lo + 1] - row_ptr[lo]) * sub, local = i - row_ptr[lo] * sub * ncb;
    return StepCursor{lo, local / steps, local % steps};
}

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Where the balanced body finds the k-tile of the t-th listed tile (row block rb): in the
// tile list (CSR order), or in rows padded to the row's k-tile count (built from counts).
struct ListedTiles {
    const int* k_tiles;
    __device__ __forceinline__ int operator()(int, int t, const int*) const { return k_tiles[t]; }
};
struct PaddedTiles {
    // written by this launch before the grid barrier, whose acquire makes plain loads see it
    // (not through the read-only path: no const, no __restrict__; __ldcg cost 3-4% at density 0.5)
    int* k_pad;
    int k_tiles;
    __device__ __forceinline__ int operator()(int rb, int t, const int* row_ptr) const {
        return k_pad[(size_t)rb * k_tiles + (t - row_ptr[rb])];
    }
};

template <int BM, int BN, int BK, class Tiles, bool AT = false>
__device__ __forceinline__ void f32_balanced_body(const float* __restrict__ A, const float* __restrict__ W,
                                                  float* __restrict__ C, int M, int N, int K, const int* row_ptr,
                                                  Tiles k_of, int TK, int row_blocks, int min_steps,
                                                  float* __restrict__ partial, int* __restrict__ flags) {
    constexpr int THREADS = F32Step<BM, BN, BK>::THREADS;
    constexpr int PATCH4 = 16;  // float4 per thread in a partial sum
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Ws[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / 8), ty = tid / (BN / 8);
    const int sub = TK / BK, ncb = N / BN, me = blockIdx.x;

    for (int strip = me; strip < row_blocks * (BM / 8); strip += gridDim.x) {  // zeros for rows without tiles, 8 at a time
        const int rb = strip / (BM / 8);
        if (row_ptr[rb] != row_ptr[rb + 1]) continue;
        const int r0 = rb * BM + (strip % (BM / 8)) * 8;
        for (int e = tid; e < 8 * (N / 4); e += THREADS) {
            const int row = r0 + e / (N / 4);
            if (row < M) *reinterpret_cast<float4*>(C + (size_t)row * N + (e % (N / 4)) * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }

    const int total = row_ptr[row_blocks] * sub * ncb;  // the host checks that it fits
    const int P = max(1, min((int)gridDim.x, total / min_steps));  // blocks that share the steps
    if (me >= P) return;
    auto start_of = [&](int b) { return (int)((long long)total * b / P); };
    const int begin = start_of(me), end = start_of(me + 1);
    if (begin >= end) return;

    // Two cursors walk the block's steps: the step loaded next (ld_*) and the output being
    // computed. Either moves to the next output only at an output's end, so a step costs
    // about what it costs in tile_gemm_f32. What is needed only at an output's end (which
    // output, whether this segment holds its first step, the split) waits in shared memory:
    // in registers it made the 128 x 128 instance spill inside the loop.
    const StepCursor at = locate_step(begin, row_ptr, row_blocks, sub, ncb);
    __shared__ int out_at[3];  // row block, column block, does the segment include its first step
    __shared__ int split[2];   // total, P
    int ld_rb = at.rb, ld_cb = at.cb, ld_sub = at.s % sub;
    int ld_tile = row_ptr[at.rb] + at.s / sub;                         // index in k_tiles
    int ld_left = (row_ptr[at.rb + 1] - row_ptr[at.rb]) * sub - at.s;  // steps of its output from the load cursor on
    int out_left = ld_left;                                             // the same for the output being computed
    if (tid == 0) {
        out_at[0] = at.rb;
        out_at[1] = at.cb;
        out_at[2] = at.s == 0;
        split[0] = total;
        split[1] = P;
    }
    auto next_output = [&](int& rb, int& cb) {  // the output after (rb, cb) with tiles; rb == row_blocks past the last
        if (++cb < ncb) return;
        cb = 0;
        do { ++rb; } while (rb < row_blocks && row_ptr[rb + 1] == row_ptr[rb]);
    };
    float acc[8][8];
    f32_clear(acc);
    F32Step<BM, BN, BK, AT> next;
    auto load_next = [&](float (*Ws)[BN]) {
        next.load(A, W, M, N, K, ld_rb * BM, ld_cb * BN, k_of(ld_rb, ld_tile, row_ptr) * TK + ld_sub * BK, Ws, tid);
        if (++ld_sub == sub) { ld_sub = 0; ++ld_tile; }
        if (--ld_left == 0) {
            next_output(ld_rb, ld_cb);
            if (ld_rb < row_blocks) {
                const int f = row_ptr[ld_rb];
                ld_tile = f;
                ld_left = (row_ptr[ld_rb + 1] - f) * sub;
            }
        }
    };
    // counting steps down (fewer live registers); the step with r to go uses buffer r & 1
    load_next(Ws[(end - begin) & 1]);
    next.store(As[(end - begin) & 1], tid);
    __syncthreads();
    for (int r = end - begin; r > 0; --r) {
        const int buf = r & 1;
        const bool more = r > 1;
        if (more) load_next(Ws[buf ^ 1]);
        f32_multiply<BM, BN, BK>(As[buf], Ws[buf], acc, tx, ty);
        if (more) next.store(As[buf ^ 1], tid);
        __syncthreads();
        if (--out_left > 0 && more) continue;
        if (!out_at[2]) {  // only a block's first segment can miss its output's start
            float4* slot = reinterpret_cast<float4*>(partial) + (size_t)me * PATCH4 * THREADS;
#pragma unroll
            for (int q = 0; q < PATCH4; ++q)
                __stcg(slot + q * THREADS + tid, make_float4(acc[q / 2][(q % 2) * 4], acc[q / 2][(q % 2) * 4 + 1],
                                                             acc[q / 2][(q % 2) * 4 + 2], acc[q / 2][(q % 2) * 4 + 3]));
            __syncthreads();
            if (tid == 0) {
                __threadfence();
                store_release(flags + me, 1);
            }
        } else {
            // the blocks after this one that start inside the output hold the rest of it
            const int total_ = split[0], P_ = split[1];
            auto start_at = [&](int b) { return (int)((long long)total_ * b / P_); };
            const int output_end = start_at(me + 1) - r + 1 + out_left;  // (one past its last step)
            for (int other = me + 1; out_left > 0 && other < P_ && start_at(other) < output_end; ++other) {
                if (tid == 0) {
                    while (load_acquire(flags + other) == 0) __nanosleep(100);
                    flags[other] = 0;
                }
                __syncthreads();
                const float4* slot = reinterpret_cast<const float4*>(partial) + (size_t)other * PATCH4 * THREADS;
#pragma unroll
                for (int q = 0; q < PATCH4; ++q) {
                    const float4 v = __ldcg(slot + q * THREADS + tid);
                    float* row = &acc[q / 2][(q % 2) * 4];
                    row[0] += v.x;
                    row[1] += v.y;
                    row[2] += v.z;
                    row[3] += v.w;
                }
            }
            f32_write_patch<BM, BN>(C, acc, M, N, out_at[0] * BM, out_at[1] * BN, tx, ty);
        }
        if (!more) break;
        f32_clear(acc);
        int out_rb = out_at[0], out_cb = out_at[1];
        next_output(out_rb, out_cb);
        out_left = (row_ptr[out_rb + 1] - row_ptr[out_rb]) * sub;
        __syncthreads();  // every thread has read out_at
        if (tid == 0) {
            out_at[0] = out_rb;
            out_at[1] = out_cb;
            out_at[2] = 1;
        }
    }
}

template <int BM, int BN, int BK, bool AT = false>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), f32_min_blocks(BM, BN)) tile_gemm_f32_balanced(
    const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int M, int N, int K,
    const int* __restrict__ row_ptr, const int* __restrict__ k_tiles, int TK, int row_blocks, int min_steps,
    float* __restrict__ partial, int* __restrict__ flags) {
    f32_balanced_body<BM, BN, BK, ListedTiles, AT>(A, W, C, M, N, K, row_ptr, ListedTiles{k_tiles}, TK, row_blocks, min_steps, partial,
                                  flags);
}

// Every block of the launch waits here until all have arrived (they are all resident: the
// host caps the grid at the occupancy). barrier[0] counts arrivals and is left zero;
// barrier[1] is a generation, raised by the last to arrive.
__device__ __forceinline__ void grid_barrier(unsigned* barrier) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned generation = (unsigned)load_acquire(reinterpret_cast<const int*>(barrier + 1));
        __threadfence();
        if (atomicAdd(barrier, 1u) == gridDim.x - 1) {
            atomicExch(barrier, 0u);
            __threadfence();
            atomicAdd(barrier + 1, 1u);
        } else {
            while ((unsigned)load_acquire(reinterpret_cast<const int*>(barrier + 1)) == generation) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// row_ptr[0 .. n] = exclusive sums of count[0 .. n) (n + 1 entries), by one block.
template <int THREADS>
__device__ __forceinline__ void block_row_pointers(const int* count, int n, int* row_ptr) {
    constexpr int WARPS = (THREADS + 31) / 32;
    constexpr unsigned LANES = THREADS >= 32 ? 0xffffffffu : (1u << THREADS) - 1u;
    __shared__ int warp_sum_of[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int per = (n + THREADS - 1) / THREADS, lo = min(n, tid * per), hi = min(n, lo + per);
    int mine = 0;
    for (int i = lo; i < hi; ++i) mine += __ldcg(count + i);
    int scan = mine;  // inclusive over the warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(LANES, scan, o);
        if (lane >= o) scan += up;
    }
    if (lane == 31 || tid == THREADS - 1) warp_sum_of[warp] = scan;
    __syncthreads();
    int before = scan - mine;
    for (int w = 0; w < warp; ++w) before += warp_sum_of[w];
    for (int i = lo; i < hi; ++i) {
        row_ptr[i] = before;
        before += __ldcg(count + i);
    }
    if (tid == THREADS - 1) row_ptr[n] = before;
    __syncthreads();
}

// The balanced schedule from the monitor's counts in one launch: each block lists some row
// blocks' tiles (k_pad, padded rows; row_count), a grid barrier, then each block sums the
// row counts into row pointers of its own (shared memory) and runs the balanced body.
// row_blocks <= COUNTS_MAX_ROW_BLOCKS.
template <int BM, int BN, int BK>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), f32_min_blocks(BM, BN)) tile_gemm_f32_balanced_counts(
    const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int M, int N, int K,
    const int* __restrict__ counts, int TK, int row_blocks, int min_steps, float* __restrict__ partial,
    int* __restrict__ flags, int* __restrict__ k_pad, int* __restrict__ row_count, unsigned* __restrict__ barrier) {
    constexpr int THREADS = (BM / 8) * (BN / 8);
    __shared__ int row_ptr[COUNTS_MAX_ROW_BLOCKS + 1];
    const int k_tiles = K / TK;
    for (int rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
        const int listed = block_list_tiles<THREADS>(counts + (size_t)rb * k_tiles, k_tiles, k_pad + (size_t)rb * k_tiles);
        if (threadIdx.x == 0) row_count[rb] = listed;
    }
    grid_barrier(barrier);
    block_row_pointers<THREADS>(row_count, row_blocks, row_ptr);
    f32_balanced_body<BM, BN, BK>(A, W, C, M, N, K, row_ptr, PaddedTiles{k_pad, k_tiles}, TK, row_blocks, min_steps,
                                  partial, flags);
}

#define TC_BK 32
#define TC_STAGES 3          // steps in flight (TF32_STAGES in spartan_py/sparsity/gpu_kernels.py)
#define TC_LDA (TC_BK + 4)   // (4 * group + lane_in_group) % 32: conflict-free A fragment loads

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned int bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
    return bits;
}

// 16 bytes global -> shared without registers; bytes = 0 fills zeros (rows past M)
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem, int bytes) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(bytes) : "memory");
}

template <int BM, int BN>
__global__ void __launch_bounds__(BM / 32 * 64) tile_gemm_tf32(const float* __restrict__ A, const float* __restrict__ W,
                                                              float* __restrict__ C, int M, int N, int K,
                                                              const int* __restrict__ row_ptr,
                                                              const int* __restrict__ k_tiles, int TK) {
    constexpr int THREADS = BM / 32 * 64;
    constexpr int LDW = BN + 8;  // (8 * lane_in_group + group) % 32: conflict-free B fragment loads
    constexpr int NI = BN / 16;  // 8-column fragments a warp
    constexpr int A_STAGE = BM * TC_LDA, W_STAGE = TC_BK * LDW;
    extern __shared__ __align__(16) float tc_smem[];  // TC_STAGES x (A [BM][TC_LDA], W [TC_BK][LDW])
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;   // fragment group and lane within it
    const int wm = warp >> 1, wn = warp & 1;  // warp rows of 32, two warp columns
    const int rb = blockIdx.y, m0 = rb * BM, n0 = blockIdx.x * BN;
    const int first = row_ptr[rb];
    const int sub = TK / TC_BK;
    const int steps = (row_ptr[rb + 1] - first) * sub;

    auto load = [&](int s) {
        float* As = tc_smem + (s % TC_STAGES) * (A_STAGE + W_STAGE);
        float* Ws = As + A_STAGE;
        const int k0 = k_tiles[first + s / sub] * TK + (s % sub) * TC_BK;
#pragma unroll
        for (int v = 0; v < BM * TC_BK / 4 / THREADS; ++v) {
            const int e = tid + v * THREADS, row = e / (TC_BK / 4), c4 = e % (TC_BK / 4);
            const bool inside = m0 + row < M;
            copy16_async(As + row * TC_LDA + c4 * 4, A + (size_t)(inside ? m0 + row : 0) * K + k0 + c4 * 4, inside ? 16 : 0);
        }
#pragma unroll
        for (int v = 0; v < TC_BK * BN / 4 / THREADS; ++v) {
            const int e = tid + v * THREADS, row = e / (BN / 4), c4 = e % (BN / 4);
            copy16_async(Ws + row * LDW + c4 * 4, W + (size_t)(k0 + row) * N + n0 + c4 * 4, 16);
        }
    };

    float acc[2][NI][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; ++s) {  // one commit group a step, empty past the last
        if (s < steps) load(s);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int s = 0; s < steps; ++s) {
        asm volatile("cp.async.wait_group %0;" ::"n"(TC_STAGES - 2) : "memory");  // step s has landed
        __syncthreads();  // ... for every thread, and step s - 1's buffer is free
        if (s + TC_STAGES - 1 < steps) load(s + TC_STAGES - 1);
        asm volatile("cp.async.commit_group;" ::: "memory");
        const float* As = tc_smem + (s % TC_STAGES) * (A_STAGE + W_STAGE);
        const float* Ws = As + A_STAGE;
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 8) {
            unsigned a[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float* base = As + (wm * 32 + i * 16 + g) * TC_LDA + kk + t;
                a[i][0] = to_tf32(base[0]);
                a[i][1] = to_tf32(base[8 * TC_LDA]);
                a[i][2] = to_tf32(base[4]);
                a[i][3] = to_tf32(base[8 * TC_LDA + 4]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float* base = Ws + (kk + t) * LDW + wn * (BN / 2) + j * 8 + g;
                const unsigned b0 = to_tf32(base[0]), b1 = to_tf32(base[4 * LDW]);
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    asm volatile(
                        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                        "{%0,%1,%2,%3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b0), "r"(b1));
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * 32 + i * 16 + g + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NI; ++j)
                *reinterpret_cast<float2*>(C + (size_t)row * N + n0 + wn * (BN / 2) + j * 8 + 2 * t) =
                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
}

#ifndef TILE_GEMM_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define TILE_GEMM_F32_INSTANCE(BM, BN)                                                                                    \
    template __global__ void tile_gemm_f32<BM, BN, 16>(const float*, const float*, float*, int, int, int, const int*,       \
                                                        const int*, int);                                                  \
    template __global__ void tile_gemm_f32_balanced<BM, BN, 16>(const float*, const float*, float*, int, int, int,          \
                                                                 const int*, const int*, int, int, int, float*, int*);     \
    template __global__ void tile_gemm_f32<BM, BN, 16, true>(const float*, const float*, float*, int, int, int,           \
                                                              const int*, const int*, int);                               \
    template __global__ void tile_gemm_f32_balanced<BM, BN, 16, true>(const float*, const float*, float*, int, int, int,    \
                                                                       const int*, const int*, int, int, int, float*,     \
                                                                       int*);                                             \
    template __global__ void tile_gemm_f32_counts<BM, BN, 16>(const float*, const float*, float*, int, int, int,            \
                                                               const int*, int);                                           \
    template __global__ void tile_gemm_f32_balanced_counts<BM, BN, 16>(const float*, const float*, float*, int, int, int,   \
                                                                        const int*, int, int, int, float*, int*, int*,    \
                                                                        int*, unsigned*);
TILE_GEMM_F32_INSTANCE(128, 128)
TILE_GEMM_F32_INSTANCE(128, 64)
TILE_GEMM_F32_INSTANCE(64, 128)
TILE_GEMM_F32_INSTANCE(64, 64)
TILE_GEMM_F32_INSTANCE(32, 128)
TILE_GEMM_F32_INSTANCE(32, 64)
TILE_GEMM_F32_INSTANCE(16, 128)
TILE_GEMM_F32_INSTANCE(16, 64)
#define TILE_GEMM_TF32_INSTANCE(BM, BN)                                                                                   \
    template __global__ void tile_gemm_tf32<BM, BN>(const float*, const float*, float*, int, int, int, const int*,        \
                                                    const int*, int);
TILE_GEMM_TF32_INSTANCE(128, 128)
TILE_GEMM_TF32_INSTANCE(128, 64)
TILE_GEMM_TF32_INSTANCE(64, 128)
TILE_GEMM_TF32_INSTANCE(64, 64)
#endif
