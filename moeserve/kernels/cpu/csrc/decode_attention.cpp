// moeserve::decode_attention: one new query token per sequence against its paged KV cache.
//
// Why (moeserve/dense/paged_decode.py has the measurements): the torch path gathers every
// sequence's context blocks into a padded [b, hk, L, D] copy (index_select) and runs
// scaled_dot_product_attention over it with an additive mask; at decode that is a few FLOPs per
// byte copied, and the two calls cost 0.4-0.6 ms a layer at 64 sequences. Here each (sequence, KV
// head) reads its keys and values where they lie in the cache, through the block table.
//
// Bits: each sequence is computed by one thread, in a fixed order (8-lane partial dot
// products summed in a fixed tree, then a serial softmax and a serial weighted sum over positions),
// so a sequence's result depends neither on the other sequences of the step nor on the thread count.
//
// Dtypes: caches fp32 or bf16 (widened on load), queries either; scores, softmax and sums in fp32,
// the output in the queries' dtype.
// Shapes: q [b, hq, D]; k_cache, v_cache [NB, BS, hk, D] contiguous; tables [b, C] int64
// (block ids, at least ceil((p + 1) / BS) valid per row); positions [b] int64, the query's position p;
// the query sees keys at positions max(0, p + 1 - window) .. p (window <= 0: no window); sinks [hq] fp32 or
// none: attention-sink logits (gpt-oss), one per query head, that join the softmax's denominator and add
// nothing to the output; out [b, hq, D].

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

// 8 cache values as fp32: fp32 as they are, bf16 widened (a bf16 is the top half of an fp32)
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8(const at::BFloat16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline float load1(const float* p) {
  return *p;
}
inline float load1(const at::BFloat16* p) {
  return static_cast<float>(*p);
}

// sum of the 8 lanes of v, in a fixed tree
inline float hsum(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)));
}

// sum_d a[d] * b[d]: 8-lane FMA partial sums over d in order, lanes summed in a fixed tree, then the
// tail (D % 8) in order
template <typename T>
inline float dot(const float* a, const T* b, int64_t D) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), load8(b + d), acc);
  }
  float sum = hsum(acc);
  for (; d < D; ++d) {
    sum += a[d] * load1(b + d);
  }
  return sum;
}

// the dots of a with 8 rows b[i] (D a multiple of 8), as one vector: lane i = dot(a, b[i]), each an
// 8-lane partial sum over d in order, lanes reduced by a fixed tree of horizontal adds
template <typename T>
inline __m256 dot8(const float* a, const T* const* b, int64_t D) {
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 av = _mm256_loadu_ps(a + d);
    for (int i = 0; i < 8; ++i) {
      acc[i] = _mm256_fmadd_ps(av, load8(b[i] + d), acc[i]);
    }
  }
  // [a0 a0 b0 b0 a1 a1 b1 b1]-style pairwise sums, then across the two 128-bit halves
  const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  // s0123 = [r0 r1 r2 r3 | r0' r1' r2' r3'] (low and high halves of rows 0-3), likewise s4567
  const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20), hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// exp of 8 lanes (Cephes' polynomial, ~1 ulp on [-87, 0], the softmax's range)
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365447504f));
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline float exp1(float x) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, exp8(_mm256_set1_ps(x)));
  return lanes[0];
}

// out[d] += w * v[d]
template <typename T>
inline void axpy(float w, const T* v, float* out, int64_t D) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(wv, load8(v + d), _mm256_loadu_ps(out + d)));
  }
  for (; d < D; ++d) {
    out[d] += w * load1(v + d);
  }
}

// softmax of s[0..L) in place: max, exp(s - max) 8 lanes at a time (the tail with the same
// polynomial), the sum as 8-lane partial sums in a fixed tree plus the tail in order, then scaled.
// With a sink (has_sink), its logit counts in the max and, last, in the sum, and gets no probability
// of its own. A NaN or +inf score, or scores all -inf (and no sink), make every probability NaN, as
// torch's softmax does: a model that blew up shows it instead of attending to zeros.
inline void softmax(float* s, int64_t L, bool has_sink, float sink) {
  const float inf = std::numeric_limits<float>::infinity();
  float top = has_sink ? sink : -inf;
  bool bad = has_sink && (std::isnan(sink) || sink == inf);
  for (int64_t t = 0; t < L; ++t) {
    bad |= std::isnan(s[t]) || s[t] == inf;
    top = std::max(top, s[t]);
  }
  if (bad || top == -inf) {
    std::fill(s, s + L, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const __m256 topv = _mm256_set1_ps(top);
  __m256 acc = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= L; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), topv));
    _mm256_storeu_ps(s + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = hsum(acc);
  for (; t < L; ++t) {
    s[t] = exp1(s[t] - top);
    total += s[t];
  }
  if (has_sink) {
    total += exp1(sink - top);
  }
  const float inv = 1.0f / total;
  for (t = 0; t < L; ++t) {
    s[t] *= inv;
  }
}

// out[0..D) = sum_t p[t] v(t)[0..D), over t in order, each lane one FMA chain; for D a multiple of
// 8 up to 128 the sums stay in registers (NV vectors), otherwise they go through out
template <int NV, typename Rows>
inline void weighted_sum_regs(const float* p, int64_t L, Rows&& v, float* out) {
  __m256 acc[NV];
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    acc[i] = _mm256_setzero_ps();
  }
  for (int64_t t = 0; t < L; ++t) {
    const __m256 w = _mm256_set1_ps(p[t]);
    const auto* row = v(t);
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) {
      acc[i] = _mm256_fmadd_ps(w, load8(row + 8 * i), acc[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    _mm256_storeu_ps(out + 8 * i, acc[i]);
  }
}

template <typename Rows>
inline void weighted_sum(const float* p, int64_t L, Rows&& v, float* out, int64_t D) {
  switch (D % 8 == 0 ? D / 8 : 0) {
    case 1: return weighted_sum_regs<1>(p, L, v, out);
    case 2: return weighted_sum_regs<2>(p, L, v, out);
    case 4: return weighted_sum_regs<4>(p, L, v, out);
    case 6: return weighted_sum_regs<6>(p, L, v, out);
    case 8: return weighted_sum_regs<8>(p, L, v, out);
    case 12: return weighted_sum_regs<12>(p, L, v, out);
    case 16: return weighted_sum_regs<16>(p, L, v, out);
    default: break;
  }
  std::fill(out, out + D, 0.0f);
  for (int64_t t = 0; t < L; ++t) {
    axpy(p[t], v(t), out, D);
  }
}

at::Tensor decode_attention(const at::Tensor& q_in, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& tables_in, const at::Tensor& positions_in, double scale, int64_t window,
                            const std::optional<at::Tensor>& sinks_in) {
  TORCH_CHECK(q_in.device().is_cpu() && k_cache.device().is_cpu() && v_cache.device().is_cpu(),
              "decode_attention: CPU tensors only");
  const auto dtype = k_cache.scalar_type();
  TORCH_CHECK((dtype == at::kFloat || dtype == at::kBFloat16) && v_cache.scalar_type() == dtype &&
                  (q_in.scalar_type() == at::kFloat || q_in.scalar_type() == at::kBFloat16),
              "decode_attention: fp32 or bf16 caches (both the same) and queries");
  TORCH_CHECK(q_in.dim() == 3 && k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(),
              "decode_attention: q [b, hq, D], caches [NB, BS, hk, D]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "decode_attention: caches must be contiguous");
  const int64_t b = q_in.size(0), hq = q_in.size(1), D = q_in.size(2);
  const int64_t NB = k_cache.size(0), BS = k_cache.size(1), hk = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == D, "decode_attention: q has head dim ", D, ", the cache ", k_cache.size(3));
  TORCH_CHECK(hk > 0 && hq % hk == 0, "decode_attention: ", hq, " query heads over ", hk, " KV heads");
  TORCH_CHECK(tables_in.dim() == 2 && tables_in.size(0) == b && positions_in.dim() == 1 && positions_in.size(0) == b,
              "decode_attention: tables [b, C], positions [b]");
  TORCH_CHECK(!at::isFloatingType(tables_in.scalar_type()) && !at::isFloatingType(positions_in.scalar_type()),
              "decode_attention: tables and positions must be integer tensors");
  const bool has_sinks = sinks_in.has_value() && sinks_in->defined();
  TORCH_CHECK(!has_sinks || (sinks_in->dim() == 1 && sinks_in->size(0) == hq && sinks_in->device().is_cpu()),
              "decode_attention: sinks [hq] on the CPU");
  const at::Tensor sinks = has_sinks ? sinks_in->to(at::kFloat).contiguous() : at::Tensor();
  const float* sp = has_sinks ? sinks.data_ptr<float>() : nullptr;
  const at::Tensor q = q_in.to(at::kFloat).contiguous();  // scores and sums in fp32 whatever the dtype
  const at::Tensor tables = tables_in.to(at::kLong).contiguous();
  const at::Tensor positions = positions_in.to(at::kLong).contiguous();
  const int64_t C = tables.size(1);
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* pp = positions.data_ptr<int64_t>();
  for (int64_t s = 0; s < b; ++s) {
    TORCH_CHECK(pp[s] >= 0 && pp[s] < C * BS, "decode_attention: position ", pp[s], " outside the block table");
    for (int64_t c = 0; c <= pp[s] / BS; ++c) {
      TORCH_CHECK(tp[s * C + c] >= 0 && tp[s * C + c] < NB, "decode_attention: block id ", tp[s * C + c],
                  " outside the cache");
    }
  }
  at::Tensor out = at::empty({b, hq, D}, q.options());
  if (b == 0) {
    return out.to(q_in.scalar_type());
  }
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t g = hq / hk;
  const float fscale = static_cast<float>(scale);
  int64_t longest = 0;
  for (int64_t s = 0; s < b; ++s) {
    longest = std::max(longest, pp[s] + 1);
  }
  // work items: sequences, each all its KV heads (a position's keys of every head are contiguous in
  // the cache, so a sequence's blocks are read front to back); a grain of ~2^14 multiply-adds keeps
  // a fork worth its cost
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, 2 * hq * longest * D));
  const int64_t row_stride = hk * D;  // values from one position to the next within a block
  const auto attend = [&](const auto* kp, const auto* vp) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(kp)>>;
    at::parallel_for(0, b, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> scores(static_cast<size_t>(hq * longest));
      for (int64_t s = begin; s < end; ++s) {
        const int64_t last = pp[s];
        const int64_t first = window > 0 ? std::max<int64_t>(0, last + 1 - window) : 0;
        const int64_t L = last + 1 - first;
        const int64_t* row = tp + s * C;
        const float* qs = qp + s * hq * D;
        float* os = op + s * hq * D;
        // offset of position first + t in a cache (head 0)
        const auto at_pos = [&](int64_t t) {
          const int64_t pos = first + t;
          return (row[pos / BS] * BS + pos % BS) * row_stride;
        };
        // scores[(h g + j) L + t] = scale * q_{h g + j} . k_{t, h}: 8 positions at a time where D is a
        // multiple of 8
        int64_t t = 0;
        if (D % 8 == 0) {
          const __m256 scale8 = _mm256_set1_ps(fscale);
          for (; t + 8 <= L; t += 8) {
            int64_t offsets[8];
            for (int i = 0; i < 8; ++i) {
              offsets[i] = at_pos(t + i);
            }
            for (int64_t h = 0; h < hk; ++h) {
              const T* keys[8];
              for (int i = 0; i < 8; ++i) {
                keys[i] = kp + offsets[i] + h * D;
              }
              for (int64_t j = 0; j < g; ++j) {
                const int64_t head = h * g + j;
                _mm256_storeu_ps(scores.data() + head * L + t, _mm256_mul_ps(dot8(qs + head * D, keys, D), scale8));
              }
            }
          }
        }
        for (; t < L; ++t) {
          const T* k = kp + at_pos(t);
          for (int64_t head = 0; head < hq; ++head) {
            scores[head * L + t] = dot(qs + head * D, k + (head / g) * D, D) * fscale;
          }
        }
        for (int64_t head = 0; head < hq; ++head) {
          softmax(scores.data() + head * L, L, has_sinks, has_sinks ? sp[head] : 0.0f);
        }
        // out_head = sum_t p_head[t] v_{t, head / g}, over t in order (the same sums either way)
        for (int64_t head = 0; head < hq; ++head) {
          weighted_sum(scores.data() + head * L, L, [&](int64_t t) { return vp + at_pos(t) + (head / g) * D; },
                       os + head * D, D);
        }
      }
    });
  };
  if (dtype == at::kFloat) {
    attend(k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
  } else {
    attend(k_cache.data_ptr<at::BFloat16>(), v_cache.data_ptr<at::BFloat16>());
  }
  return out.to(q_in.scalar_type());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moeserve, m) {
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor tables, Tensor positions, float scale, "
        "int window, Tensor? sinks=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("decode_attention", &decode_attention);
}
