// moeserve::rms_norm: out = weight * (h * rsqrt(mean(h^2) + eps)) with h = x (+ residual), fp32, one op.
//
// Why (kernels/cpu/norm.py has the measurements): at decode a norm is [8, 256] floats, and torch runs
// the pre-norm block's residual add and F.rms_norm as several ops of a few microseconds each, mostly
// dispatch; a decoder layer has two norms and the model one more. One call here does the add, the
// sum of squares and the scaling in two passes over the row while it sits in L1.
//
// Bits: each row's sum of squares is kept in 16 lanes (lane i holds the columns = i mod 16, the tail
// read through a mask as zeros), summed in one fixed order; the AVX2 path (two 8-lane halves) and the
// AVX-512 path (one 16-lane vector) do the same fp32 operations in the same order, so they give the
// same bits, and a row's result depends on no other row nor on the thread count. Against torch's
// ops it differs by fp32 rounding of the sum (~1e-7 relative).
//
// Shapes: x, residual [T, H] fp32 (unit stride in H), weight [H] fp32: rms_norm(x) -> out [T, H];
// add_rms_norm(x, residual) -> (out [T, H], h [T, H]).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kGrain = int64_t{1} << 15;  // floats a thread takes at least (~32k: tens of microseconds)

// The lane sums in one fixed order, shared by both paths.
inline float sum_lanes(const float* lanes) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) {
    s += lanes[i];
  }
  return s;
}

inline __m256i tail_mask256(int64_t n) {  // first n of 8 lanes set (n in 0..8)
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// h = x + r (r may be null) stored to hrow; returns the sum of squares of h.
float add_square_sum256(const float* x, const float* r, float* hrow, int64_t H) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t c = 0; c < H; c += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, H - c);
    const __m256i mlo = tail_mask256(std::min<int64_t>(8, n)), mhi = tail_mask256(std::max<int64_t>(0, n - 8));
    __m256 a = _mm256_maskload_ps(x + c, mlo), b = _mm256_maskload_ps(x + c + 8, mhi);
    if (r != nullptr) {
      a = _mm256_add_ps(a, _mm256_maskload_ps(r + c, mlo));
      b = _mm256_add_ps(b, _mm256_maskload_ps(r + c + 8, mhi));
      _mm256_maskstore_ps(hrow + c, mlo, a);
      _mm256_maskstore_ps(hrow + c + 8, mhi, b);
    }
    // two roundings (square, then add), as torch's pow and sum: never an FMA, so both paths agree
    const __m256 a2 = _mm256_mul_ps(a, a), b2 = _mm256_mul_ps(b, b);
    lo = _mm256_add_ps(lo, a2);
    hi = _mm256_add_ps(hi, b2);
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  return sum_lanes(lanes);
}

void scale256(const float* h, const float* w, float inv, float* out, int64_t H) {
  const __m256 s = _mm256_set1_ps(inv);
  for (int64_t c = 0; c < H; c += 8) {
    const __m256i m = tail_mask256(std::min<int64_t>(8, H - c));
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(h + c, m), s);
    _mm256_maskstore_ps(out + c, m, _mm256_mul_ps(v, _mm256_maskload_ps(w + c, m)));
  }
}

__attribute__((target("avx512f"))) float add_square_sum512(const float* x, const float* r, float* hrow, int64_t H) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < H; c += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, H - c);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    __m512 a = _mm512_maskz_loadu_ps(m, x + c);
    if (r != nullptr) {
      a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, r + c));
      _mm512_mask_storeu_ps(hrow + c, m, a);
    }
    const __m512 a2 = _mm512_mul_ps(a, a);
    acc = _mm512_add_ps(acc, a2);
  }
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  return sum_lanes(lanes);
}

__attribute__((target("avx512f"))) void scale512(const float* h, const float* w, float inv, float* out, int64_t H) {
  const __m512 s = _mm512_set1_ps(inv);
  for (int64_t c = 0; c < H; c += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, H - c);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, h + c), s);
    _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + c)));
  }
}

bool has_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

// vector_bits: 512 or 256 forces a path (tests), 0 takes AVX-512 where the CPU has it.
std::tuple<at::Tensor, at::Tensor> norm_rows(const at::Tensor& x_in, const std::optional<at::Tensor>& residual,
                                             const at::Tensor& weight, double eps, int64_t vector_bits) {
  TORCH_CHECK(x_in.device().is_cpu() && weight.device().is_cpu(), "rms_norm: CPU tensors only");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "rms_norm: fp32 only");
  TORCH_CHECK(x_in.dim() == 2 && weight.dim() == 1 && weight.size(0) == x_in.size(1), "rms_norm: x [T, H], weight [H]");
  TORCH_CHECK(vector_bits == 0 || vector_bits == 256 || (vector_bits == 512 && has_avx512()),
              "rms_norm: vector_bits is 0, 256, or 512 on a CPU with AVX-512");
  const bool avx512 = vector_bits == 512 || (vector_bits == 0 && has_avx512());
  const int64_t T = x_in.size(0), H = x_in.size(1);
  const at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  const at::Tensor w = weight.contiguous();
  at::Tensor r, h = x;
  if (residual.has_value()) {
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == at::kFloat && residual->device().is_cpu(),
                "rms_norm: residual must be fp32 CPU shaped as x");
    r = residual->stride(1) == 1 ? *residual : residual->contiguous();
    h = at::empty({T, H}, x.options());
  }
  at::Tensor out = at::empty({T, H}, x.options());
  const float* wp = w.data_ptr<float>();
  // rows over intra-op threads (a prefill's); a decode step's few rows stay inline. A row is computed
  // by one thread whatever the split, so its bits do not depend on the thread count
  at::parallel_for(0, T, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, H)), [&](int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    const float* xr = x.data_ptr<float>() + t * x.stride(0);
    const float* rr = r.defined() ? r.data_ptr<float>() + t * r.stride(0) : nullptr;
    float* hr = h.data_ptr<float>() + t * h.stride(0);
    const float ss = avx512 ? add_square_sum512(xr, rr, hr, H) : add_square_sum256(xr, rr, hr, H);
    // torch's order: mean (sum / H), + eps, rsqrt (as 1 / sqrt, correctly rounded)
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + static_cast<float>(eps));
    float* o = out.data_ptr<float>() + t * H;
    if (avx512) {
      scale512(hr, wp, inv, o, H);
    } else {
      scale256(hr, wp, inv, o, H);
    }
  }
  });
  return {out, h};
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, int64_t vector_bits) {
  return std::get<0>(norm_rows(x, std::nullopt, weight, eps, vector_bits));
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps, int64_t vector_bits) {
  return norm_rows(x, residual, weight, eps, vector_bits);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moeserve, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, int vector_bits=0) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps, int vector_bits=0) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
}
