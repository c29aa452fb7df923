// Tile-sparse GEMM: C = A @ W for a row-major activation matrix A [M x K] whose zero tiles
// are skipped, and a dense row-major weight W [K x N]. Compiled at run time by CuPy.
//
// The tile list is CSR over row blocks of BM rows: row block rb multiplies the k-tiles
// k_tiles[row_ptr[rb] .. row_ptr[rb + 1]) of TK columns each (TK a multiple of BK); any
// other part of its rows is zero and is never read. A row block with no tiles writes zeros.
// Requirements (checked by the Python wrapper): K % TK == 0, N % BN == 0, pointers 16-byte
// aligned; M is free (rows past M read as zero and are not stored).
//
// tile_gemm_f32: FP32 on the CUDA cores. Each thread computes an 8 x 8 patch split in four
// 4 x 4 quarters (rows ty*4 + {0..3} and BM/2 + ty*4 + {0..3}, the same for columns) so
// that its float4 shared-memory reads are free of bank conflicts. A is stored transposed in
// shared memory; the next step's operands are prefetched into registers while the current
// step computes (two shared buffers, one barrier per step).
//
// tile_gemm_tf32: TF32 tensor cores through PTX mma.sync.m16n8k8 (NVRTC builds without
// <mma.h>), 8 warps in a 2 x 4 grid, each warp a 64 x 32 patch (4 x 4 fragments of
// 16 x 8); operands are rounded to TF32 (cvt.rna: to nearest, ties away) when stored in
// shared memory; accumulation in FP32. Shared rows are padded so fragment loads hit 32
// different banks.

template <int BM, int BN, int BK>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), 2) tile_gemm_f32(
    const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int M, int N, int K,
    const int* __restrict__ row_ptr, const int* __restrict__ k_tiles, int TK) {
    constexpr int THREADS = (BM / 8) * (BN / 8);
    constexpr int A_VEC = BM * BK / 4 / THREADS;  // float4 of A per thread per step
    constexpr int W_VEC = BK * BN / 4 / THREADS;
    static_assert(A_VEC >= 1 && W_VEC >= 1, "tile too small for the block");
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Ws[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / 8), ty = tid / (BN / 8);
    const int rb = blockIdx.y, m0 = rb * BM, n0 = blockIdx.x * BN;
    const int first = row_ptr[rb];
    const int sub_steps = TK / BK;
    const int steps = (row_ptr[rb + 1] - first) * sub_steps;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 a_reg[A_VEC], w_reg[W_VEC];
    auto load = [&](int s) {
        const int k0 = k_tiles[first + s / sub_steps] * TK + (s % sub_steps) * BK;
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            const int e = tid + v * THREADS, row = e / (BK / 4), c4 = e % (BK / 4);
            a_reg[v] = (m0 + row < M) ? *reinterpret_cast<const float4*>(A + (size_t)(m0 + row) * K + k0 + c4 * 4)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int v = 0; v < W_VEC; ++v) {
            const int e = tid + v * THREADS, row = e / (BN / 4), c4 = e % (BN / 4);
            w_reg[v] = *reinterpret_cast<const float4*>(W + (size_t)(k0 + row) * N + n0 + c4 * 4);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            const int e = tid + v * THREADS, row = e / (BK / 4), c4 = e % (BK / 4);
            As[buf][c4 * 4 + 0][row] = a_reg[v].x;
            As[buf][c4 * 4 + 1][row] = a_reg[v].y;
            As[buf][c4 * 4 + 2][row] = a_reg[v].z;
            As[buf][c4 * 4 + 3][row] = a_reg[v].w;
        }
#pragma unroll
        for (int v = 0; v < W_VEC; ++v) {
            const int e = tid + v * THREADS, row = e / (BN / 4), c4 = e % (BN / 4);
            *reinterpret_cast<float4*>(&Ws[buf][row][c4 * 4]) = w_reg[v];
        }
    };

    if (steps > 0) {
        load(0);
        store(0);
        __syncthreads();
    }
    for (int s = 0; s < steps; ++s) {
        const int buf = s & 1;
        if (s + 1 < steps) load(s + 1);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[8], w[8];
            *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
            *reinterpret_cast<float4*>(a + 4) = *reinterpret_cast<const float4*>(&As[buf][kk][BM / 2 + ty * 4]);
            *reinterpret_cast<float4*>(w) = *reinterpret_cast<const float4*>(&Ws[buf][kk][tx * 4]);
            *reinterpret_cast<float4*>(w + 4) = *reinterpret_cast<const float4*>(&Ws[buf][kk][BN / 2 + tx * 4]);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
        }
        if (s + 1 < steps) store(buf ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
        if (row >= M) continue;
        float* out = C + (size_t)row * N + n0;
        *reinterpret_cast<float4*>(out + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(out + BN / 2 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_LDA (TC_BK + 4)   // (4 * group + lane_in_group) % 32: conflict-free A fragment loads
#define TC_LDW (TC_BN + 8)   // (8 * lane_in_group + group) % 32: conflict-free B fragment loads

__device__ __forceinline__ float to_tf32(float x) {
    unsigned int bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
    return __uint_as_float(bits);
}

__global__ void __launch_bounds__(256) tile_gemm_tf32(const float* __restrict__ A, const float* __restrict__ W,
                                                      float* __restrict__ C, int M, int N, int K,
                                                      const int* __restrict__ row_ptr, const int* __restrict__ k_tiles,
                                                      int TK) {
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                  // [TC_BM][TC_LDA]
    float* Ws = smem + TC_BM * TC_LDA;  // [TC_BK][TC_LDW]
    constexpr int A_VEC = TC_BM * TC_BK / 4 / 256, W_VEC = TC_BK * TC_BN / 4 / 256;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;   // fragment group and lane within it
    const int wm = warp / 4, wn = warp % 4;  // 2 x 4 warps, 64 x 32 each
    const int rb = blockIdx.y, m0 = rb * TC_BM, n0 = blockIdx.x * TC_BN;
    const int first = row_ptr[rb];
    const int sub_steps = TK / TC_BK;
    const int steps = (row_ptr[rb + 1] - first) * sub_steps;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    float4 a_reg[A_VEC], w_reg[W_VEC];
    auto load = [&](int s) {
        const int k0 = k_tiles[first + s / sub_steps] * TK + (s % sub_steps) * TC_BK;
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            const int e = tid + v * 256, row = e / (TC_BK / 4), c4 = e % (TC_BK / 4);
            a_reg[v] = (m0 + row < M) ? *reinterpret_cast<const float4*>(A + (size_t)(m0 + row) * K + k0 + c4 * 4)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int v = 0; v < W_VEC; ++v) {
            const int e = tid + v * 256, row = e / (TC_BN / 4), c4 = e % (TC_BN / 4);
            w_reg[v] = *reinterpret_cast<const float4*>(W + (size_t)(k0 + row) * N + n0 + c4 * 4);
        }
    };

    if (steps > 0) load(0);
    for (int s = 0; s < steps; ++s) {
#pragma unroll
        for (int v = 0; v < A_VEC; ++v) {
            const int e = tid + v * 256, row = e / (TC_BK / 4), c4 = e % (TC_BK / 4);
            const float4 x = a_reg[v];
            *reinterpret_cast<float4*>(As + row * TC_LDA + c4 * 4) = make_float4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w));
        }
#pragma unroll
        for (int v = 0; v < W_VEC; ++v) {
            const int e = tid + v * 256, row = e / (TC_BN / 4), c4 = e % (TC_BN / 4);
            const float4 x = w_reg[v];
            *reinterpret_cast<float4*>(Ws + row * TC_LDW + c4 * 4) = make_float4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w));
        }
        __syncthreads();
        if (s + 1 < steps) load(s + 1);
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 8) {
            unsigned int a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float* base = As + (wm * 64 + i * 16 + g) * TC_LDA + kk + t;
                a[i][0] = __float_as_uint(base[0]);
                a[i][1] = __float_as_uint(base[8 * TC_LDA]);
                a[i][2] = __float_as_uint(base[4]);
                a[i][3] = __float_as_uint(base[8 * TC_LDA + 4]);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float* base = Ws + (kk + t) * TC_LDW + wn * 32 + j * 8 + g;
                b[j][0] = __float_as_uint(base[0]);
                b[j][1] = __float_as_uint(base[4 * TC_LDW]);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                        "{%0,%1,%2,%3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * 64 + i * 16 + g + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                *reinterpret_cast<float2*>(C + (size_t)row * N + n0 + wn * 32 + j * 8 + 2 * t) =
                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
}

#ifndef TILE_GEMM_NO_EXPLICIT_INSTANCES  // CuPy instantiates what it names; nvcc builds in CI use these
#define TILE_GEMM_F32_INSTANCE(BM, BN)                                                                          \
    template __global__ void tile_gemm_f32<BM, BN, 16>(const float*, const float*, float*, int, int, int, \
                                                        const int*, const int*, int);
TILE_GEMM_F32_INSTANCE(128, 128)
TILE_GEMM_F32_INSTANCE(128, 64)
TILE_GEMM_F32_INSTANCE(64, 128)
TILE_GEMM_F32_INSTANCE(64, 64)
TILE_GEMM_F32_INSTANCE(32, 128)
TILE_GEMM_F32_INSTANCE(32, 64)
TILE_GEMM_F32_INSTANCE(16, 128)
TILE_GEMM_F32_INSTANCE(16, 64)
#endif
