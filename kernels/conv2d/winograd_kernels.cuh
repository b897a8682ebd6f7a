/* conv2d's Winograd F(2x2, 3x3) kernels (variant winograd), included by
 * kernels/conv2d/launch.cu, which holds the launches (run_winograd; the
 * choice of variant: cuda.cu); this file needs what launch.cu includes
 * before it (the dtype helpers of common.cuh).
 *
 * The convolution of a 4x4 input patch d with a 3x3 filter g gives a 2x2
 * output Y = A^T [(G g G^T) .* (B^T d B)] A, with
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G   = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2015): 16 multiplications per 2x2 outputs and input channel instead of
 * 36. Summed over the input channels, the element-wise product is, for
 * each of the 16 positions xi of the 4x4 transform, a matrix product
 *   M_xi (K, T) = V_xi (K, C) @ U_xi (C, T)
 * over the T = N * ceil(P/2) * ceil(Q/2) output tiles: 16 GEMMs of the
 * same shape, one strided-batched cuBLASLt call (true float32). Three
 * kernels here feed and drain it, all with float intermediates whatever T:
 *   wino_filter  V[xi][k][c] = (G g_kc G^T)[xi]     one thread per (k, c)
 *   wino_input   U[xi][c][t] = (B^T d_ct B)[xi]     one thread per (c, t)
 *   wino_output  y[n][k][2th + i][2tw + j] = (A^T m_kt A)[i][j] + bias[k]
 *                                                   one thread per (k, t)
 * Thread indices run fastest over the GEMM's contiguous dimension, so the
 * 16 scattered stores of wino_filter / wino_input and the 16 loads of
 * wino_output are coalesced. The transforms' coefficients are 0, +-1 and
 * +-1/2 (exact in float): the error is the GEMM's, over C products of
 * transformed values a few times larger than the inputs. */
#ifndef OPD_KERNELS_CONV2D_WINOGRAD_KERNELS_CUH
#define OPD_KERNELS_CONV2D_WINOGRAD_KERNELS_CUH

typedef struct wino_geom {
  int64_t C, H, W, K, P, Q;        /* as conv_plan_t (R = S = 3, stride 1) */
  int64_t ph, pw;                  /* padding */
  int64_t TH, TW;                  /* output tiles down / across an image */
  int64_t T;                       /* tiles of the chunk's images */
  int64_t Tpad;                    /* T rounded up to 4 (the GEMM's row pitch) */
} wino_geom_t;

/* V[xi][k][c] from weight (K, C, 3, 3), one thread per (k, c). */
template <typename T>
__global__ void wino_filter(const T *__restrict__ w, float *__restrict__ V, int64_t K,
                            int64_t C) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= K * C) return;
  const T *g = w + e * 9;
  float gg[9];
#pragma unroll
  for (int i = 0; i < 9; i++) gg[i] = to_f(g[i]);
  float a[4][3]; /* G g */
#pragma unroll
  for (int s = 0; s < 3; s++) {
    float g0 = gg[s], g1 = gg[3 + s], g2 = gg[6 + s];
    a[0][s] = g0;
    a[1][s] = 0.5f * (g0 + g1 + g2);
    a[2][s] = 0.5f * (g0 - g1 + g2);
    a[3][s] = g2;
  }
  const int64_t KC = K * C;
#pragma unroll
  for (int i = 0; i < 4; i++) { /* (G g) G^T */
    float v[4] = {a[i][0], 0.5f * (a[i][0] + a[i][1] + a[i][2]),
                  0.5f * (a[i][0] - a[i][1] + a[i][2]), a[i][2]};
#pragma unroll
    for (int j = 0; j < 4; j++) V[(i * 4 + j) * KC + e] = v[j];
  }
}

/* U[xi][c][t] for the chunk of images starting at x (t < Tpad; the
 * columns past T are zeros), one thread per (c, t). */
template <typename T>
__global__ void wino_input(const T *__restrict__ x, float *__restrict__ U, wino_geom_t g) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= g.C * g.Tpad) return;
  int64_t c = e / g.Tpad, t = e - c * g.Tpad;
  float d[4][4];
  if (t < g.T) {
    int64_t tiles = g.TH * g.TW, n = t / tiles, r = t - n * tiles;
    int64_t th = r / g.TW, tw = r - th * g.TW;
    int64_t ih0 = 2 * th - g.ph, iw0 = 2 * tw - g.pw;
    const T *xc = x + (n * g.C + c) * g.H * g.W;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int64_t ih = ih0 + i;
      bool row = ih >= 0 && ih < g.H;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        int64_t iw = iw0 + j;
        d[i][j] = row && iw >= 0 && iw < g.W ? to_f(__ldg(xc + ih * g.W + iw)) : 0.0f;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) d[i][j] = 0.0f;
  }
  float b[4][4]; /* B^T d */
#pragma unroll
  for (int j = 0; j < 4; j++) {
    b[0][j] = d[0][j] - d[2][j];
    b[1][j] = d[1][j] + d[2][j];
    b[2][j] = d[2][j] - d[1][j];
    b[3][j] = d[1][j] - d[3][j];
  }
  const int64_t CT = g.C * g.Tpad;
#pragma unroll
  for (int i = 0; i < 4; i++) { /* (B^T d) B */
    float u[4] = {b[i][0] - b[i][2], b[i][1] + b[i][2], b[i][2] - b[i][1], b[i][1] - b[i][3]};
#pragma unroll
    for (int j = 0; j < 4; j++) U[(i * 4 + j) * CT + e] = u[j];
  }
}

/* y of the chunk's images from M[xi][k][t] (+ bias), one thread per
 * (k, t < T). */
template <typename T>
__global__ void wino_output(const float *__restrict__ M, const T *__restrict__ bias,
                            T *__restrict__ y, wino_geom_t g) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t k = e / g.T, t = e - k * g.T;
  if (k >= g.K) return;
  const int64_t KTP = g.K * g.Tpad;
  const float *mk = M + k * g.Tpad + t;
  float m[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) m[i][j] = __ldg(mk + (i * 4 + j) * KTP);
  float a[2][4]; /* A^T m */
#pragma unroll
  for (int j = 0; j < 4; j++) {
    a[0][j] = m[0][j] + m[1][j] + m[2][j];
    a[1][j] = m[1][j] - m[2][j] - m[3][j];
  }
  float bv = bias ? to_f(bias[k]) : 0.0f;
  int64_t tiles = g.TH * g.TW, n = t / tiles, r = t - n * tiles;
  int64_t th = r / g.TW, tw = r - th * g.TW;
  T *yk = y + (n * g.K + k) * g.P * g.Q;
#pragma unroll
  for (int i = 0; i < 2; i++) { /* (A^T m) A */
    int64_t p = 2 * th + i;
    if (p >= g.P) break;
    float v0 = a[i][0] + a[i][1] + a[i][2], v1 = a[i][1] - a[i][2] - a[i][3];
    int64_t q = 2 * tw;
    yk[p * g.Q + q] = from_f<T>(v0 + bv);
    if (q + 1 < g.Q) yk[p * g.Q + q + 1] = from_f<T>(v1 + bv);
  }
}

#endif /* OPD_KERNELS_CONV2D_WINOGRAD_KERNELS_CUH */
