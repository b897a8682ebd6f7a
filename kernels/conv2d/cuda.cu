/* conv2d on the GPU, float32 / float16 / bfloat16 (x, weight, bias of one
 * dtype), geometry from the shared plan (kernels/conv2d/plan.h): groups,
 * unbatched input (N = 1) and asymmetric padding ('same' with an even
 * kernel) included.
 *
 * Variants (opd__conv2d_cuda_variant; opd__conv2d_cuda runs AUTO):
 *   igemm      implicit GEMM, any R x S, stride, dilation and padding
 *              (int32 indexing: OPD_EINVAL past it). y (K, N*P*Q) =
 *              weight (K, C*R*S) @ columns, the columns gathered from x
 *              into shared memory stage by stage (BK channels at one tap),
 *              never written to global memory; zeros for padding taps and
 *              for channels / output channels / pixels past the end, so
 *              any C, K, N*P*Q works. Two kernels:
 *              float16 / bfloat16: tensor cores through WMMA 16x16x16 with
 *                float accumulators (sm_80+), 64 output channels x 128 / 64
 *                / 32 pixels per block (tiles L / M / S), each warp 32 x 32;
 *              float32: FFMA only (no TF32: products and sums in float32,
 *                as the tolerances assume), register-blocked 8x8 / 8x4 / 4x4
 *                outputs per thread on tiles 64x128 / 64x64 / 32x64 (L/M/S).
 *              The tile is the largest giving >= 2 blocks per SM, else S.
 *              Why faster than direct3x3: the direct kernel reads one smem
 *              weight per FMA (LDS-bound, ~13 TFLOP/s at best); here a thread reads 4 float4 per 64 FMAs (float32 L),
 *              and the half types run on tensor cores.
 *   winograd   R = S = 3, stride 1, dilation 1, any padding, any dtype
 *              (float intermediates): Winograd F(2x2, 3x3), 16 products per
 *              2x2 outputs and channel instead of 36, as three transform
 *              kernels around one strided-batched cuBLASLt float32 GEMM of
 *              16 items (kernels/conv2d/winograd_kernels.cuh says how).
 *              Scratch: the transformed filter, input and output tiles
 *              (16/4 = 4x the input and output of a chunk of images).
 *   direct3x3  R = S = 3, stride 1, dilation 1, any padding: a direct
 *              kernel. A block computes a 16x16 tile of output pixels for
 *              16 output channels; input channels go through shared memory
 *              8 at a time (an 18x18 halo tile each, zeros outside the
 *              image) with their 16x8x9 weights; each thread accumulates
 *              its pixel's 16 channels in float registers. No scratch.
 *   im2col     every geometry: im2col of a chunk of images into the
 *              workspace scratch, cols_n (C*R*S, P*Q), then one strided-
 *              batched cuBLASLt GEMM y_n (K, P*Q) = weight (K, C*R*S) @
 *              cols_n with the weight repeated (batch stride 0), fp32
 *              accumulation, the bias pre-filled into y and added through
 *              beta = 1. A 1x1 kernel with stride 1 and no padding skips
 *              im2col (cols_n is x_n). Costs one extra write + read of the
 *              columns (R*S times x) through chunks of up to 32 MiB (the
 *              workspace asked for); cuBLASLt splits long reductions
 *              (split-K), which igemm does not. For float16 / bfloat16
 *              the split-K parts are summed in float (kernels/cuda/gemm.cuh:
 *              cuBLASLt's default sums them in the 16-bit output type).
 *   grouped    groups > 1 (depthwise included; the variants above take
 *              groups = 1 only and refuse others with OPD_EINVAL), also
 *              any groups = 1 geometry: a direct kernel, one thread per
 *              output element (grouped.cu says how). No scratch.
 * AUTO (auto_variant): groups > 1 -> grouped; 1x1 stride 1 unpadded ->
 * im2col (a plain GEMM);
 * float32 3x3 stride 1 dilation 1 with C and K >= 16 -> winograd (while
 * one image's transforms fit in 64 MiB of scratch); other
 * stride 1 dilation 1 -> igemm (half types on sm_80+), except on a small
 * grid with a long reduction -> im2col: igemm's tile S gives fewer than 2
 * blocks per SM and C*R*S >= 1024 (float32) / 512 (half types), where
 * cuBLASLt's split-K keeps the GPU busy; 3x3 stride 1 that igemm cannot
 * take (half types before sm_80, past its int32 indexing) -> direct3x3;
 * float32 with a stride (dilation 1) where igemm's tile L gives 0.7 blocks
 * per SM -> igemm; the rest (stride or dilation > 1) -> im2col. float32
 * igemm takes tile L from 0.7 blocks per SM (igemm_f32_large), else the
 * largest giving 2 blocks per SM. direct3x3 is never AUTO's
 * choice where igemm runs: it wins only at C = 3 float32, by 5%.
 * cuDNN would be the library that does conv well, but it is not on the
 * GPU machine (no cudnn headers or libs there).
 * Scratch: im2col and winograd use it; when the workspace's scratch holds
 * less than one image's worth, that much comes from cudaMallocAsync on the
 * stream and goes back with cudaFreeAsync after the last kernel.
 * Measured 2026-11-30 (bench/results/2026-11-30-h200-kernels.txt), before
 * this routing (3x3 pad 1,
 * us, median of 20, L2 flushed; gpu_kernels --bench, torch = cuDNN through
 * bench/bench_torch_kernels.py, float32 with TF32 off):
 *                            direct3x3  im2col  igemm  torch   AUTO now
 *   float32  N1 C3 224 K64      30.6     44.6    32.3   30.0   igemm
 *            N1 C64 56 K64      67.4     43.0    31.8   28.0   igemm
 *            N8 C256 14 K256   249.1    138.1   169.5  103.9   im2col
 *            N32 C64 56 K64    556.9    831.8   293.0  257.8   igemm
 *   bfloat16 N1 C3 224 K64      28.9     40.9    25.4   31.6   igemm
 *            N1 C64 56 K64      70.7     30.4    39.8   23.1   im2col
 *            N8 C256 14 K256   252.3     74.1   140.6   30.8   im2col
 *            N32 C64 56 K64    504.8    632.6   110.8   73.9   igemm
 * (132 SMs: tile S blocks are 1568 / 98 / 200 / 3136 in float32 and
 * 1568 / 98 / 196 / 3136 in bfloat16, C*R*S 27 / 576 / 2304 / 576.)
 * The im2col times were taken with a 96 MiB scratch (one chunk for N8)
 * and before the reduction-scheme fix in gemm.cu; re-measure both.
 * Since then (2026-12-02, bench/results/2026-12-02-h200-winograd.txt):
 * winograd, float32, us against cuDNN's: N1 C64 56 K64 21.8 / 27.6, N8
 * C256 14 K256 44.8 / 108.4, N32 C64 56 K64 223.7 / 257.2, and ResNet-18's
 * stride-1 layers at batch 8 0.32-0.74x cuDNN's time.
 * Files: this one is the router (AUTO's choice, the workspace size, the
 * entry points); launch.cu holds each variant's kernels and its launcher
 * (launch.h), igemm_kernels.cuh and winograd_kernels.cuh the kernels of
 * those two variants.
 * Test: build/tests/gpu_kernels --op conv2d ("gpu op=conv2d[igemm]",
 * "[igemm:L]" / "[igemm:M]" / "[igemm:S]" (tiles forced through
 * kernels/conv2d/igemm.h), "[direct3x3]", "[winograd]", "[im2col]",
 * "[grouped]" and "" (AUTO) lines,
 * three dtypes); bench: build/tests/gpu_kernels --bench --op conv2d
 * ("bench op=conv2d variant=... dtype=float32|bfloat16" lines), torch /
 * cuDNN in the same run: python3 bench/bench_torch_kernels.py.
 */
#include <type_traits>

#include <mma.h>

#include "kernels/cuda/gemm.cuh"

extern "C" {
#include "kernels/conv2d/plan.h"
}
#include "kernels/conv2d/igemm.h"
#include "kernels/conv2d/launch.h"

/* ---- choosing a variant ----------------------------------------------- */

static bool is_direct(const conv_plan_t *p) {
  return p->R == 3 && p->S == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1 &&
         p->C <= INT32_MAX && p->H < INT32_MAX / 2 && p->W < INT32_MAX / 2 &&
         p->K <= INT32_MAX && p->N <= 65535 && p->ph < (1 << 20) && p->pw < (1 << 20);
}

static bool is_wino(const conv_plan_t *p) {
  return p->R == 3 && p->S == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1;
}


/* The implicit-GEMM kernels index in int32: offsets inside one image of x
 * and inside weight, pixel numbers over N*P*Q (+ a tile), input rows and
 * columns with their padding; K tiles (of 32 or 64) go in gridDim.y. */
static bool igemm_fits(const conv_plan_t *p) {
  const int64_t lim = INT32_MAX;
  return p->C * p->H * p->W <= lim && p->K * p->C * p->R * p->S <= lim &&
         p->N * p->P * p->Q <= lim - 256 && (p->K + 31) / 32 <= 65535 &&
         p->H + p->ph + p->pb <= (1 << 30) && p->W + p->pw + p->pr <= (1 << 30);
}

/* Blocks of igemm tile t (OPD_IGEMM_TILE_L/M/S) for the call. */
static int64_t igemm_blocks(const conv_plan_t *p, bool half, int t) {
  int64_t bm = !half && t == OPD_IGEMM_TILE_S ? 32 : IG_BM;
  int64_t bn = t == OPD_IGEMM_TILE_L ? 128 : t == OPD_IGEMM_TILE_M ? 64 : half ? 32 : 64;
  return (p->K + bm - 1) / bm * ((p->N * p->P * p->Q + bn - 1) / bn);
}

/* float32: tile L (8x8 outputs a thread) as soon as it gives 0.7 blocks
 * per SM: its register reuse beats the parallelism of the smaller tiles
 * even at less than one full round of blocks (2026-12-02,
 * bench/results/2026-12-02-h200-words.txt; ResNet-18's 3x3 convs at batch 8, us,
 * gpu_kernels --bench: N8 C128 28x28 K128 L 135.8 (98 blocks) / M 152.2 /
 * S 161.4; N8 C64 56x56 K64 L 111.6 (196) / M 115.2; C64 56x56 K128
 * stride 2 L 76.4 (98) / im2col 83.2; at 52 blocks L loses: C256 14x14
 * K256 L 253.6 / S 170.5). */
static bool igemm_f32_large(const conv_plan_t *p, int sms) {
  return igemm_blocks(p, false, OPD_IGEMM_TILE_L) * 10 >= 7 * (int64_t)sms;
}

/* The largest tile that still gives every SM two blocks, else the
 * smallest: small images and few channels need the parallelism more than
 * the reuse of a large tile (float32: L from 0.7 blocks per SM). */
static int igemm_tile(const conv_plan_t *p, bool half, int sms) {
  if (!half && igemm_f32_large(p, sms)) return OPD_IGEMM_TILE_L;
  for (int t = OPD_IGEMM_TILE_L; t < OPD_IGEMM_TILE_S; t++)
    if (igemm_blocks(p, half, t) >= 2 * (int64_t)sms) return t;
  return OPD_IGEMM_TILE_S;
}

/* Reduction lengths C*R*S from which a small grid goes to im2col (3x3,
 * igemm vs im2col; 2026-11-30,
 * bench/results/2026-11-30-h200-kernels-2.txt). float32: igemm's FFMA
 * kernel and cuBLASLt's SGEMM
 * are close per FLOP, so only a long reduction pays for the columns pass
 * (C*R*S 576: 31.8 us vs 43.0; 2304: 169.5 vs 138.1). Half types:
 * cuBLASLt's Hopper kernels do far more per SM than the WMMA kernel's
 * 2-warp tile S blocks (576: 39.8 vs 30.4; 2304: 140.6 vs 74.1). Both
 * cut-offs lie between measured points (512 a guess below 576: shorter
 * reductions leave little for split-K to win over the columns pass and
 * the two extra launches). */
#define SMALL_GRID_CRS_F32 1024
#define SMALL_GRID_CRS_HALF 512

/* Even igemm's smallest tile gives fewer than two blocks per SM, and the
 * reduction is long: igemm has no split-K and leaves most SMs idle for
 * C*R*S steps, cuBLASLt splits the reduction (deep layers on small
 * images: N1 C64 56x56, N8 C256 14x14). */
static bool igemm_small_grid(const conv_plan_t *p, bool half, int sms) {
  int64_t crs = p->C * p->R * p->S;
  return igemm_blocks(p, half, OPD_IGEMM_TILE_S) < 2 * (int64_t)sms &&
         crs >= (half ? SMALL_GRID_CRS_HALF : SMALL_GRID_CRS_F32);
}

/* float32 3x3 stride 1 goes to winograd from this many input and output
 * channels (fewer: the 16 GEMMs' reduction or rows are too short to pay
 * for the transforms' passes; 2026-11-30,
 * bench/results/2026-11-30-h200-kernels-2.txt: N1 C3 224x224 K64 49.5 us against
 * igemm's 32.4, N1 C64 56x56 K64 21.8 against 31.8; 16 is a guess between
 * the two), and while one image's scratch fits in WINO_CHUNK_BYTES (a
 * larger image or filter: igemm, which needs none). */
#define WINO_MIN_CHANNELS 16

static bool wino_auto(const conv_plan_t *p) {
  return is_wino(p) && p->C >= WINO_MIN_CHANNELS && p->K >= WINO_MIN_CHANNELS &&
         wino_bytes(p, 1) <= WINO_CHUNK_BYTES;
}

/* AUTO on a GPU with `sms` SMs of compute capability cc_major:
 * pointwise -> im2col (a plain cuBLASLt GEMM); float32 3x3 stride 1
 * dilation 1 (wino_auto) -> winograd; stride 1 dilation 1 -> igemm (half
 * types on sm_80+), unless the grid is small and the reduction
 * long (igemm_small_grid) -> im2col; 3x3 stride 1 that igemm cannot take
 * (half types before sm_80, past its int32 indexing) -> direct3x3; the
 * rest -> im2col. */
static int auto_variant(const conv_plan_t *p, int32_t dtype, int sms, int cc_major) {
  bool half = dtype != OPD_DTYPE_FLOAT32;
  if (p->G > 1) return OPD_CONV_GROUPED;
  if (is_pointwise(p)) return OPD_CONV_IM2COL;
  if (!half && wino_auto(p)) return OPD_CONV_WINOGRAD;
  if (p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1 && igemm_fits(p) &&
      (!half || cc_major >= 8))
    return igemm_small_grid(p, half, sms) ? OPD_CONV_IM2COL : OPD_CONV_IGEMM;
  /* float32 with a stride, tile L filling the GPU: igemm (C64 56x56 K128
   * stride 2: 76.4 us against im2col's 83.2; with fewer blocks im2col's
   * split-K wins: C128 28x28 K256 stride 2, im2col 75.9 against 89.5) */
  if (!half && p->dh == 1 && p->dw == 1 && igemm_fits(p) && igemm_f32_large(p, sms))
    return OPD_CONV_IGEMM;
  if (is_direct(p)) return OPD_CONV_DIRECT3X3;
  return OPD_CONV_IM2COL;
}

/* SM count and compute capability major of the current device (the
 * daemon's device thread, the test's device); 132 SMs of sm_90 when the
 * query fails (its error is cleared: it must not surface at a later launch). */
static void current_device(int *sms, int *major) {
  int dev;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    *sms = 132;
    *major = 9;
  }
}

/* im2col's scratch: the columns of as many images as fit in
 * IM2COL_CHUNK_BYTES, at least one, so that a small batch is one im2col
 * launch and one batched GEMM rather than a pair per image, and the GEMM
 * reads the columns back from L2 (50 MiB on the GPUs it was tuned on). */
#define IM2COL_CHUNK_BYTES ((size_t)32 << 20)
extern "C" size_t opd__conv2d_cuda_workspace(const opd_kcall_t *call) {
  conv_plan_t p;
  if (opd__conv2d_plan((opd_kcall_t *)call, &p)) return 0;
  if (p.N == 0 || p.K == 0 || p.P * p.Q == 0 || is_pointwise(&p) || p.G > 1) return 0;
  int sms, major;
  current_device(&sms, &major);
  int v = auto_variant(&p, call->in[0].dtype, sms, major);
  if (v == OPD_CONV_WINOGRAD) return wino_bytes(&p, wino_chunk(&p));
  if (v != OPD_CONV_IM2COL) return 0;
  size_t img = (size_t)(p.C * p.R * p.S * p.P * p.Q) * opd__dtype_size(call->in[0].dtype);
  if (img == 0) return 0; /* C = 0: no columns, y is the bias */
  size_t n = img >= IM2COL_CHUNK_BYTES ? 1 : IM2COL_CHUNK_BYTES / img;
  if (n > (size_t)p.N) n = (size_t)p.N;
  size_t b = n * img;
  return (b + 255) & ~(size_t)255;
}

/* SM count and compute capability major of ctx's device. */
static int device_info(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int *sms, int *major) {
  OPD_CUDA_CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, ctx->device));
  OPD_CUDA_CHECK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, ctx->device));
  return 0;
}

/* igemm with tile `tile` (OPD_IGEMM_TILE_AUTO: by size) on a planned,
 * non-empty call; OPD_EINVAL where it does not apply. */
static int igemm_checked(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, const conv_plan_t *p,
                         int tile) {
  int sms, major, rc = device_info(call, ctx, &sms, &major);
  if (rc) return rc;
  int32_t dt = call->out[0].dtype;
  bool half = dt != OPD_DTYPE_FLOAT32;
  if (!igemm_fits(p))
    return opd__kerr(call, OPD_EINVAL, "too large for the implicit-GEMM kernel's int32 indexing");
  if (half && major < 8)
    return opd__kerr(call, OPD_EINVAL, "the implicit-GEMM kernel needs sm_80 for %s",
                     opd__kdtype_name(dt));
  if (tile == OPD_IGEMM_TILE_AUTO) tile = igemm_tile(p, half, sms);
  if (tile < OPD_IGEMM_TILE_L || tile > OPD_IGEMM_TILE_S)
    return opd__kerr(call, OPD_EINVAL, "unknown implicit-GEMM tile %d", tile);
  return opd__conv2d_run_igemm(call, ctx, p, tile);
}

/* ---- entry points --------------------------------------------------------- */

/* OPD_EINVAL for a groups > 1 call given to a groups = 1 variant. */
static int groups_one(opd_kcall_t *call, const conv_plan_t *p) {
  return opd__kerr(call, OPD_EINVAL,
                   "groups=%lld: only the grouped kernel takes groups > 1, this "
                   "variant takes groups=1",
                   (long long)p->G);
}

extern "C" int opd__conv2d_cuda_igemm(opd_kcall_t *call, const opd_cuda_ctx_t *ctx, int tile) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.N == 0 || p.K == 0 || p.P * p.Q == 0) return 0;
  if (p.G > 1) return groups_one(call, &p);
  return igemm_checked(call, ctx, &p, tile);
}

extern "C" int opd__conv2d_cuda_variant(opd_kcall_t *call, const opd_cuda_ctx_t *ctx,
                                        int variant) {
  conv_plan_t p;
  int rc = opd__conv2d_plan(call, &p);
  if (rc) return rc;
  if (p.N == 0 || p.K == 0 || p.P * p.Q == 0) return 0;
  int32_t dt = call->out[0].dtype;
  if (variant == OPD_CONV_AUTO) {
    int sms, major;
    if ((rc = device_info(call, ctx, &sms, &major))) return rc;
    variant = auto_variant(&p, dt, sms, major);
  }
  if (variant == OPD_CONV_GROUPED) return opd__conv2d_run_grouped(call, ctx, &p);
  if (p.G > 1) return groups_one(call, &p);
  switch (variant) {
    case OPD_CONV_IGEMM:
      return igemm_checked(call, ctx, &p, OPD_IGEMM_TILE_AUTO);
    case OPD_CONV_DIRECT3X3:
      if (!is_direct(&p))
        return opd__kerr(call, OPD_EINVAL,
                         "the direct kernel takes 3x3, stride 1, dilation 1 only");
      return opd__conv2d_run_direct(call, ctx, &p);
    case OPD_CONV_IM2COL:
      return opd__conv2d_run_im2col(call, ctx, &p);
    case OPD_CONV_WINOGRAD:
      if (!is_wino(&p))
        return opd__kerr(call, OPD_EINVAL,
                         "the Winograd kernels take 3x3, stride 1, dilation 1 only");
      if (p.C == 0) variant = OPD_CONV_IM2COL; /* no reduction: y is the bias */
      return variant == OPD_CONV_IM2COL ? opd__conv2d_run_im2col(call, ctx, &p)
                                        : opd__conv2d_run_winograd(call, ctx, &p);
    default:
      return opd__kerr(call, OPD_EINVAL, "unknown conv2d variant %d", variant);
  }
}

extern "C" int opd__conv2d_cuda(opd_kcall_t *call, const opd_cuda_ctx_t *ctx) {
  return opd__conv2d_cuda_variant(call, ctx, OPD_CONV_AUTO);
}
