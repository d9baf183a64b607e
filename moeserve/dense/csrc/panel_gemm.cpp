// moeserve::panel_linear: y = x @ w.T for a few rows of x, with w stored in 16-column panels.
//
// Why (moeserve/dense/panel_gemm.py has the measurements): at decode an expert gets 1-8 rows, and
// its GEMM is a stream of its weights; oneDNN's packed kernel reads them at a third to a half of
// what the core can stream. Here each panel of 16 output columns is K x 16 contiguous floats, read
// once from memory for every block of up to 6 rows (the panel stays in L1 between row blocks).
//
// Bits: every output element is one fp32 sum over k = 0..K-1 in order, with FMA, by one thread,
// whatever the row count, the other rows, or the number of threads: a row's result does not depend
// on the batch it came in, and a step gives the same bits on 1 or N intra-op threads.
//
// Shapes: x [M, K] fp32 (unit stride in K), panels [P, K, 16] fp32 contiguous (columns n = 16 p + j,
// zero beyond out_features), out [M, out_features].

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kPanel = 16;
constexpr int64_t kRowBlock = 6;  // 6 rows x 2 vectors = 12 accumulators + 2 weights + 1 broadcast

template <int R>
inline void panel_block(const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; ++r) {
    lo[r] = _mm256_setzero_ps();
    hi[r] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(w + k * kPanel);
    const __m256 w1 = _mm256_loadu_ps(w + k * kPanel + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(x + r * ldx + k);
      lo[r] = _mm256_fmadd_ps(b, w0, lo[r]);
      hi[r] = _mm256_fmadd_ps(b, w1, hi[r]);
    }
  }
  if (cols == kPanel) {
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(out + r * ldo, lo[r]);
      _mm256_storeu_ps(out + r * ldo + 8, hi[r]);
    }
    return;
  }
  alignas(32) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tmp, lo[r]);
    _mm256_store_ps(tmp + 8, hi[r]);
    std::copy(tmp, tmp + cols, out + r * ldo);
  }
}

void panel_rows(const float* x, int64_t ldx, int64_t M, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols) {
  int64_t m = 0;
  for (; m + kRowBlock <= M; m += kRowBlock) {
    panel_block<kRowBlock>(x + m * ldx, ldx, w, K, out + m * ldo, ldo, cols);
  }
  const float* xm = x + m * ldx;
  float* om = out + m * ldo;
  switch (M - m) {
    case 1: panel_block<1>(xm, ldx, w, K, om, ldo, cols); break;
    case 2: panel_block<2>(xm, ldx, w, K, om, ldo, cols); break;
    case 3: panel_block<3>(xm, ldx, w, K, om, ldo, cols); break;
    case 4: panel_block<4>(xm, ldx, w, K, om, ldo, cols); break;
    case 5: panel_block<5>(xm, ldx, w, K, om, ldo, cols); break;
    default: break;
  }
}

at::Tensor panel_linear(const at::Tensor& x_in, const at::Tensor& panels, int64_t out_features) {
  TORCH_CHECK(x_in.device().is_cpu() && panels.device().is_cpu(), "panel_linear: CPU tensors only");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && panels.scalar_type() == at::kFloat, "panel_linear: fp32 only");
  TORCH_CHECK(x_in.dim() == 2 && panels.dim() == 3 && panels.size(2) == kPanel, "panel_linear: x [M, K], panels [P, K, 16]");
  TORCH_CHECK(panels.is_contiguous(), "panel_linear: panels must be contiguous");
  const int64_t M = x_in.size(0), K = x_in.size(1), P = panels.size(0);
  TORCH_CHECK(panels.size(1) == K, "panel_linear: x has ", K, " features, the panels ", panels.size(1));
  TORCH_CHECK(out_features > (P - 1) * kPanel && out_features <= P * kPanel, "panel_linear: out_features does not fit the panels");
  const at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  at::Tensor out = at::empty({M, out_features}, x.options());
  if (M == 0 || out_features == 0) {
    return out;
  }
  const float* xp = x.data_ptr<float>();
  const int64_t ldx = x.stride(0);
  const float* wp = panels.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // panels split over intra-op threads (each output element stays on one thread); a grain of about
  // 2^16 multiply-adds (~15 us) is far above a fork/join, so even an expert's 1-2 rows (~100 us of
  // weight streaming) use the second core of a wide step; with one thread this runs inline
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, K * kPanel * M));
  at::parallel_for(0, P, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t cols = std::min<int64_t>(kPanel, out_features - p * kPanel);
      panel_rows(xp, ldx, M, wp + p * K * kPanel, K, op + p * kPanel, out_features, cols);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(moeserve, m) {
  m.def("panel_linear(Tensor x, Tensor panels, int out_features) -> Tensor");
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("panel_linear", &panel_linear);
}
