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
#include <cstdlib>
#include <string>
#include <utility>

namespace {

constexpr int64_t kPanel = 16;
constexpr int64_t kRowBlock = 6;  // 6 rows x 2 vectors = 12 accumulators + 2 weights + 1 broadcast
// Panel rows (one 64-byte line each) the loops prefetch ahead of the row they multiply: 2 KiB, across
// the 4 KiB page boundaries where the hardware streamers stop, and on into the next panel (a prefetch
// past the end of the panels never faults). A weight is read once per call, so at decode sizes the
// call is bound by how many lines are in flight: on an Intel Xeon (2-core VM, one thread, 48 MiB of
// expert panels) 8 lines ahead streamed 19.7 GB/s, 32 lines 24.9, none 18.8, 64 and 128 lines 23.9
// and 23.7; a tiny-mixtral decode step at 8 sequences took 0.89x the time (docs/performance.md).
// A prefetch changes no arithmetic: the bits are the same with or without it.
constexpr int64_t kPrefetchRows = 32;

inline void prefetch_row(const float* w, int64_t k) {
  _mm_prefetch(reinterpret_cast<const char*>(w + (k + kPrefetchRows) * kPanel), _MM_HINT_T0);
}

// One accumulator pair per row, named: GCC keeps an indexed array of __m256 on the stack and stores
// every accumulator back on every k (12 stores a step at R = 6, which made a 6-row block slower
// than two blocks of 3), while named registers stay in registers.
#define MOESERVE_ROW_FMA(i)                                          \
  if constexpr (R > i) {                                             \
    const __m256 b = _mm256_broadcast_ss(x + i * ldx + k);           \
    lo##i = _mm256_fmadd_ps(b, w0, lo##i);                           \
    hi##i = _mm256_fmadd_ps(b, w1, hi##i);                           \
  }
#define MOESERVE_ROW_STORE(i)                                        \
  if constexpr (R > i) {                                             \
    store_row(lo##i, hi##i, out + i * ldo, cols);                    \
  }

inline void store_row(__m256 lo, __m256 hi, float* out, int64_t cols) {
  if (cols == kPanel) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    return;
  }
  alignas(32) float tmp[kPanel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::copy(tmp, tmp + cols, out);
}

template <int R>
inline void panel_block(const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols) {
  static_assert(R >= 1 && R <= kRowBlock);
  __m256 lo0 = _mm256_setzero_ps(), hi0 = _mm256_setzero_ps(), lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0;
  __m256 lo3 = lo0, hi3 = lo0, lo4 = lo0, hi4 = lo0, lo5 = lo0, hi5 = lo0;
  for (int64_t k = 0; k < K; ++k) {
    prefetch_row(w, k);
    const __m256 w0 = _mm256_loadu_ps(w + k * kPanel);
    const __m256 w1 = _mm256_loadu_ps(w + k * kPanel + 8);
    MOESERVE_ROW_FMA(0) MOESERVE_ROW_FMA(1) MOESERVE_ROW_FMA(2)
    MOESERVE_ROW_FMA(3) MOESERVE_ROW_FMA(4) MOESERVE_ROW_FMA(5)
  }
  MOESERVE_ROW_STORE(0) MOESERVE_ROW_STORE(1) MOESERVE_ROW_STORE(2)
  MOESERVE_ROW_STORE(3) MOESERVE_ROW_STORE(4) MOESERVE_ROW_STORE(5)
}

#undef MOESERVE_ROW_FMA
#undef MOESERVE_ROW_STORE

template <int... Rs>
inline void panel_tail(int64_t rows, const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo,
                       int64_t cols, std::integer_sequence<int, Rs...>) {
  ((rows == Rs + 1 ? panel_block<Rs + 1>(x, ldx, w, K, out, ldo, cols) : void()), ...);
}

// Rows in blocks of as even a size as the largest block allows (16 rows: 8 + 8, not 12 + 4): a
// block of few rows has too few independent accumulators to hide the FMA latency.
template <int64_t Max, typename Block>
inline void even_blocks(int64_t M, Block&& block) {
  const int64_t blocks = (M + Max - 1) / Max;
  int64_t m = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t rows = (M - m) / (blocks - b);
    block(m, rows);
    m += rows;
  }
}

void panel_rows(const float* x, int64_t ldx, int64_t M, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols) {
  even_blocks<kRowBlock>(M, [&](int64_t m, int64_t rows) {
    panel_tail(rows, x + m * ldx, ldx, w, K, out + m * ldo, ldo, cols, std::make_integer_sequence<int, kRowBlock>{});
  });
}

// AVX-512 (a CPU that has it): two panels side by side, one 16-float register per row and panel,
// up to 12 rows a block: 2 R accumulators, enough at R >= 5 to hide the FMA latency on both FMA
// pipes (a single panel's 7-row block ran at 0.7 of a 12-row block's rate per row), and one
// broadcast per row and k feeds both panels. Every output element is the same in-order FMA sum
// over k as in the AVX2 path, so both give the same bits; which one runs depends only on the CPU.
constexpr int64_t kRowBlock512 = 12;

#define MOESERVE_ROW_FMA512(i)                                       \
  if constexpr (R > i) {                                             \
    const __m512 b = _mm512_set1_ps(x[i * ldx + k]);                 \
    a##i = _mm512_fmadd_ps(b, wa, a##i);                             \
    if constexpr (Two) {                                             \
      b##i = _mm512_fmadd_ps(b, wb, b##i);                           \
    }                                                                \
  }
#define MOESERVE_ROW_STORE512(i)                                     \
  if constexpr (R > i) {                                             \
    _mm512_mask_storeu_ps(out + i * ldo, mask_a, a##i);              \
    if constexpr (Two) {                                             \
      _mm512_mask_storeu_ps(out + i * ldo + kPanel, mask_b, b##i);   \
    }                                                                \
  }

// R rows against one panel (Two = false) or against panels w and w + K * 16 (Two = true), whose
// columns land at out[, 0..cols_a) and out[, 16..16 + cols_b)
template <int R, bool Two>
__attribute__((target("avx512f"))) inline void panel_block512(
    const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols_a, int64_t cols_b) {
  static_assert(R >= 1 && R <= kRowBlock512);
  const __m512 zero = _mm512_setzero_ps();
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero, a4 = zero, a5 = zero;
  __m512 a6 = zero, a7 = zero, a8 = zero, a9 = zero, a10 = zero, a11 = zero;
  __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero, b4 = zero, b5 = zero;
  __m512 b6 = zero, b7 = zero, b8 = zero, b9 = zero, b10 = zero, b11 = zero;
  const float* w_b = w + K * kPanel;
  for (int64_t k = 0; k < K; ++k) {
    prefetch_row(w, k);
    if constexpr (Two) {
      prefetch_row(w_b, k);
    }
    const __m512 wa = _mm512_loadu_ps(w + k * kPanel);
    const __m512 wb = Two ? _mm512_loadu_ps(w_b + k * kPanel) : zero;
    MOESERVE_ROW_FMA512(0) MOESERVE_ROW_FMA512(1) MOESERVE_ROW_FMA512(2) MOESERVE_ROW_FMA512(3)
    MOESERVE_ROW_FMA512(4) MOESERVE_ROW_FMA512(5) MOESERVE_ROW_FMA512(6) MOESERVE_ROW_FMA512(7)
    MOESERVE_ROW_FMA512(8) MOESERVE_ROW_FMA512(9) MOESERVE_ROW_FMA512(10) MOESERVE_ROW_FMA512(11)
  }
  const __mmask16 mask_a = static_cast<__mmask16>((1u << cols_a) - 1u);
  const __mmask16 mask_b = static_cast<__mmask16>((1u << cols_b) - 1u);
  MOESERVE_ROW_STORE512(0) MOESERVE_ROW_STORE512(1) MOESERVE_ROW_STORE512(2) MOESERVE_ROW_STORE512(3)
  MOESERVE_ROW_STORE512(4) MOESERVE_ROW_STORE512(5) MOESERVE_ROW_STORE512(6) MOESERVE_ROW_STORE512(7)
  MOESERVE_ROW_STORE512(8) MOESERVE_ROW_STORE512(9) MOESERVE_ROW_STORE512(10) MOESERVE_ROW_STORE512(11)
}

#undef MOESERVE_ROW_FMA512
#undef MOESERVE_ROW_STORE512

template <bool Two, int... Rs>
__attribute__((target("avx512f"))) inline void panel_tail512(
    int64_t rows, const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols_a,
    int64_t cols_b, std::integer_sequence<int, Rs...>) {
  ((rows == Rs + 1 ? panel_block512<Rs + 1, Two>(x, ldx, w, K, out, ldo, cols_a, cols_b) : void()), ...);
}

// rows against panels p (and p + 1 when pair): out columns from 16 p
__attribute__((target("avx512f"))) void panel_rows512(
    const float* x, int64_t ldx, int64_t M, const float* w, int64_t K, float* out, int64_t ldo, int64_t cols_a,
    int64_t cols_b, bool pair) {
  even_blocks<kRowBlock512>(M, [&](int64_t m, int64_t rows) {
    if (pair) {
      panel_tail512<true>(rows, x + m * ldx, ldx, w, K, out + m * ldo, ldo, cols_a, cols_b,
                          std::make_integer_sequence<int, kRowBlock512>{});
    } else {
      panel_tail512<false>(rows, x + m * ldx, ldx, w, K, out + m * ldo, ldo, cols_a, 0,
                           std::make_integer_sequence<int, kRowBlock512>{});
    }
  });
}

// The AVX-512 path unless the CPU lacks it or MOESERVE_PANEL_ISA=avx2 (for tests and comparisons).
bool use_avx512() {
  static const bool use = [] {
    const char* isa = std::getenv("MOESERVE_PANEL_ISA");
    if (isa != nullptr && std::string(isa) == "avx2") {
      return false;
    }
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return use;
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
  // AVX-512 with several row blocks (7-12 rows each): panels in pairs, so a block has enough
  // accumulators (the last panel alone when P is odd); otherwise one panel at a time
  const bool avx512 = use_avx512();
  const int64_t width = avx512 && M > kRowBlock512 ? 2 : 1;
  const auto cols_of = [&](int64_t p) { return p < P ? std::min<int64_t>(kPanel, out_features - p * kPanel) : 0; };
  at::parallel_for(0, (P + width - 1) / width, (grain + width - 1) / width, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t p = width * unit;
      const float* w = wp + p * K * kPanel;
      float* o = op + p * kPanel;
      if (avx512) {
        const bool pair = width == 2 && p + 1 < P;
        panel_rows512(xp, ldx, M, w, K, o, out_features, cols_of(p), pair ? cols_of(p + 1) : 0, pair);
      } else {
        panel_rows(xp, ldx, M, w, K, o, out_features, cols_of(p));
      }
    }
  });
  return out;
}

// Vector width of the path panel_linear takes here (512 or 256): callers size their few-row range by it.
int64_t panel_vector_bits() {
  return use_avx512() ? 512 : 256;
}

}  // namespace

TORCH_LIBRARY(moeserve, m) {
  m.def("panel_linear(Tensor x, Tensor panels, int out_features) -> Tensor");
  m.def("panel_vector_bits() -> int", &panel_vector_bits);
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("panel_linear", &panel_linear);
}
