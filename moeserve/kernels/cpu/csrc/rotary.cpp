// moeserve::rotary: x [N, h, D] rotated by cos, sin [N, D] in the rotate-half layout (HF's
// apply_rotary_pos_emb), fp32, one op instead of torch's chain of ~9 (slices, neg, cat, two muls,
// an add: kernels/cpu/small_ops.py has the measurements).
//
// Bits: out = x * cos + rotate_half(x) * sin, each product rounded, then added, as the torch
// reference does (kernels/base.py: apply_rotary_reference); never an FMA, so the bits are the
// reference's.
//
// Shapes: x [N, h, D] fp32 (any strides with unit stride in D: the q and k columns of the QKV
// output), cos, sin [N, D] fp32 -> out [N, h, D] contiguous.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

namespace {

// GCC contracts a * b + c into an FMA across statements by default in C++; the reference rounds each
// product first, so this function must not.
__attribute__((optimize("fp-contract=off"))) void rotate_head(const float* x, const float* c, const float* s,
                                                                float* out, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t d = 0; d < half; ++d) {
    const float a = x[d] * c[d];
    const float b = -x[d + half] * s[d];
    out[d] = a + b;
  }
  for (int64_t d = half; d < D; ++d) {
    const float a = x[d] * c[d];
    const float b = x[d - half] * s[d];
    out[d] = a + b;
  }
}

at::Tensor rotary(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in) {
  TORCH_CHECK(x_in.device().is_cpu() && x_in.dim() == 3, "rotary: x [N, h, D] on the CPU");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && cos_in.scalar_type() == at::kFloat && sin_in.scalar_type() == at::kFloat,
              "rotary: fp32 only");
  const int64_t N = x_in.size(0), h = x_in.size(1), D = x_in.size(2);
  TORCH_CHECK(D % 2 == 0, "rotary: the head dim must be even");
  TORCH_CHECK(cos_in.sizes() == sin_in.sizes() && cos_in.dim() == 2 && cos_in.size(0) == N && cos_in.size(1) == D,
              "rotary: cos, sin [N, D]");
  const at::Tensor x = x_in.stride(2) == 1 ? x_in : x_in.contiguous();
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  at::Tensor out = at::empty({N, h, D}, x.options().memory_format(at::MemoryFormat::Contiguous));
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // tokens over intra-op threads (a prefill's); a decode step's few stay inline; each element is
  // computed by one thread, so the bits do not depend on the thread count
  at::parallel_for(0, N, std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, h * D)), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t i = 0; i < h; ++i) {
        rotate_head(xp + n * x.stride(0) + i * x.stride(1), cp + n * D, sp + n * D, op + (n * h + i) * D, D);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moeserve, m) {
  m.def("rotary(Tensor x, Tensor cos, Tensor sin) -> Tensor");
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("rotary", &rotary);
}
