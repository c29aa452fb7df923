// col2im as a gather (spartan_py.sparsity.workloads.col2im on CuPy arrays): one thread per
// pixel of the NCHW maps sums every im2col entry that pixel appears in and writes it once.
// The strided-add form (one read-modify-write of the whole output per kernel offset, each
// add reading one float per im2col row) moved about 2.6x im2col's bytes; this one reads each
// entry once and writes each pixel once. Sums run over (ky, kx) in order from zero, as the
// strided adds do, so both forms give the same floats.
extern "C" __global__ void col2im_gather(const float* __restrict__ cols, long long ld, int n, int c, int h, int w,
                                         int kernel, int stride, int pad, int oh, int ow, float* __restrict__ out) {
    long long total = (long long)n * c * h * w;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        // threads in (image, y, channel, x) order: a warp writes 32 neighbouring pixels of one
        // map row, and the blocks in flight cover every channel of a few output rows, whose
        // im2col rows (each read by `kernel` output rows) then stay in L2 until all are summed
        int x = (int)(i % w);
        int ch = (int)((i / w) % c);
        int y = (int)((i / ((long long)w * c)) % h);
        long long img = i / ((long long)w * c * h);
        float sum = 0.0f;
        for (int ky = 0; ky < kernel; ++ky) {
            int ty = y + pad - ky;
            if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;
            long long row_y = (img * oh + ty / stride) * ow;
            const float* base = cols + (long long)(ch * kernel + ky) * kernel;
            for (int kx = 0; kx < kernel; ++kx) {
                int tx = x + pad - kx;
                if (tx < 0 || tx % stride != 0 || tx / stride >= ow) continue;
                sum += base[(row_y + tx / stride) * ld + kx];
            }
        }
        out[((img * c + ch) * h + y) * w + x] = sum;
    }
}
