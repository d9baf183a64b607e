// The MoE layer's small operations around the experts on one rank, each one op instead of a chain of
// torch ops of a few microseconds each (kernels/cpu/moe_routing.py has the measurements):
//
//   softmax_topk(logits [T, E], k, renormalize) -> (ids [T, k] int64, weights [T, k] fp32)
//       the softmax is torch's own (at::softmax: the same bits); the top k are picked here where they
//       are unambiguous, and by at::topk for a row where two of its k + 1 largest are equal, so ties
//       break exactly as torch.topk breaks them.
//   moe_gather(hidden [T, H], slots [T, k] int64, S) -> (rows [T k, H], row_pos [T k] int64, counts [S] int64)
//       the rows of each (token, j) in slot-major order, positions in order within a slot: a stable
//       counting sort, the order of the local dispatcher's stable argsort (dispatch/local.py).
//   moe_combine(rows [R, H], row_pos [R] int64, weights [T, k] fp32) -> [T, H] fp32
//       out[t] = w[t, 0] rows(t, 0) + w[t, 1] rows(t, 1) + ..., each product rounded, then summed in
//       j order: the bits of dispatch/base.py's weighted_sum_fixed_order.
//
// gather and combine split their rows over intra-op threads at prefill sizes; every output element
// is computed by one thread, so nothing here depends on the thread count.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

namespace {

constexpr int64_t kGrain = int64_t{1} << 15;  // floats a thread copies or sums at least (~32k)

// Indices of the k + 1 (or E) largest of row[0..E) by value, the first index among equals, in order;
// false where the pick is not unique (two of them equal, or a NaN), which at::topk then decides.
bool pick_top(const float* row, int64_t E, int64_t k, int64_t* ids, std::vector<char>& taken) {
  const int64_t n = std::min(E, k + 1);
  std::fill(taken.begin(), taken.end(), 0);
  float prev = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (std::isnan(row[e])) {
        return false;
      }
      if (!taken[e] && (best < 0 || row[e] > row[best])) {
        best = e;
      }
    }
    if (j > 0 && row[best] == prev) {
      return false;
    }
    taken[best] = 1;
    prev = row[best];
    if (j < k) {
      ids[j] = best;
    }
  }
  return true;
}

std::tuple<at::Tensor, at::Tensor> softmax_topk(const at::Tensor& logits, int64_t k, bool renormalize) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2, "softmax_topk: logits [T, E] on the CPU");
  const int64_t T = logits.size(0), E = logits.size(1);
  TORCH_CHECK(k >= 1 && k <= E, "softmax_topk: k must be in [1, E]");
  const at::Tensor probs = at::softmax(logits.to(at::kFloat), -1).contiguous();
  at::Tensor ids = at::empty({T, k}, logits.options().dtype(at::kLong));
  at::Tensor weights = at::empty({T, k}, logits.options().dtype(at::kFloat));
  const float* p = probs.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  float* wp = weights.data_ptr<float>();
  std::vector<char> taken(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = p + t * E;
    int64_t* id = ip + t * k;
    float* w = wp + t * k;
    if (pick_top(row, E, k, id, taken)) {
      for (int64_t j = 0; j < k; ++j) {
        w[j] = row[id[j]];
      }
    } else {
      auto [values, indices] = at::topk(probs[t], k, -1);
      std::memcpy(w, values.data_ptr<float>(), k * sizeof(float));
      std::memcpy(id, indices.data_ptr<int64_t>(), k * sizeof(int64_t));
    }
    if (renormalize) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        sum += w[j];
      }
      for (int64_t j = 0; j < k; ++j) {
        w[j] = w[j] / sum;
      }
    }
  }
  return {ids, weights};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_gather(const at::Tensor& hidden_in, const at::Tensor& slots_in,
                                                          int64_t num_slots) {
  TORCH_CHECK(hidden_in.device().is_cpu() && hidden_in.dim() == 2, "moe_gather: hidden [T, H] on the CPU");
  TORCH_CHECK(slots_in.dim() == 2 && slots_in.size(0) == hidden_in.size(0), "moe_gather: slots [T, k]");
  const at::Tensor hidden = hidden_in.contiguous(), slots = slots_in.to(at::kLong).contiguous();
  const int64_t T = hidden.size(0), H = hidden.size(1), R = slots.numel(), k = slots.size(1);
  const int64_t* s = slots.data_ptr<int64_t>();
  at::Tensor counts = at::zeros({num_slots}, slots.options());
  int64_t* c = counts.data_ptr<int64_t>();
  for (int64_t i = 0; i < R; ++i) {
    TORCH_CHECK(s[i] >= 0 && s[i] < num_slots, "moe_gather: slot ", s[i], " is not in [0, ", num_slots, ")");
    ++c[s[i]];
  }
  std::vector<int64_t> next(num_slots, 0);
  for (int64_t e = 1; e < num_slots; ++e) {
    next[e] = next[e - 1] + c[e - 1];
  }
  at::Tensor row_pos = at::empty({R}, slots.options());
  at::Tensor rows = at::empty({R, H}, hidden.options());
  int64_t* rp = row_pos.data_ptr<int64_t>();
  const auto elem = hidden.element_size();
  const char* hp = static_cast<const char*>(hidden.data_ptr());
  char* op = static_cast<char*>(rows.data_ptr());
  for (int64_t i = 0; i < R; ++i) {
    rp[next[s[i]]++] = i;
  }
  // the row copies over intra-op threads (a prefill's); a decode step's stay inline
  at::parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, H)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(op + r * H * elem, hp + (rp[r] / k) * H * elem, H * elem);
    }
  });
  (void)T;
  return {rows, row_pos, counts};
}

// GCC contracts a * b + c into an FMA across statements by default in C++; the reference rounds the
// product first, so this function must not.
__attribute__((optimize("fp-contract=off"))) void combine_rows(const float* const* terms, const float* w, int64_t k,
                                                                  float* out, int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    out[h] = terms[0][h] * w[0];
  }
  for (int64_t j = 1; j < k; ++j) {
    const float* r = terms[j];
    const float wj = w[j];
    for (int64_t h = 0; h < H; ++h) {
      const float product = r[h] * wj;
      out[h] = out[h] + product;
    }
  }
}

at::Tensor moe_combine(const at::Tensor& rows_in, const at::Tensor& row_pos_in, const at::Tensor& weights_in) {
  TORCH_CHECK(rows_in.device().is_cpu() && rows_in.dim() == 2 && weights_in.dim() == 2, "moe_combine: rows [R, H], weights [T, k]");
  const int64_t T = weights_in.size(0), k = weights_in.size(1), H = rows_in.size(1);
  TORCH_CHECK(rows_in.size(0) == T * k && row_pos_in.numel() == T * k, "moe_combine: one row for each (token, j)");
  const at::Tensor rows = rows_in.to(at::kFloat).contiguous(), weights = weights_in.to(at::kFloat).contiguous();
  const at::Tensor row_pos = row_pos_in.to(at::kLong).contiguous();
  const int64_t* rp = row_pos.data_ptr<int64_t>();
  const float* base = rows.data_ptr<float>();
  std::vector<const float*> by_pos(T * k, nullptr);
  for (int64_t i = 0; i < T * k; ++i) {
    TORCH_CHECK(rp[i] >= 0 && rp[i] < T * k && by_pos[rp[i]] == nullptr, "moe_combine: row_pos is not a permutation");
    by_pos[rp[i]] = base + i * H;
  }
  at::Tensor out = at::empty({T, H}, rows.options());
  const float* wp = weights.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // tokens over intra-op threads (a prefill's); each output row is summed by one thread
  at::parallel_for(0, T, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, k * H)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      combine_rows(by_pos.data() + t * k, wp + t * k, k, op + t * H, H);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moeserve, m) {
  m.def("softmax_topk(Tensor logits, int k, bool renormalize) -> (Tensor, Tensor)");
  m.def("moe_gather(Tensor hidden, Tensor slots, int num_slots) -> (Tensor, Tensor, Tensor)");
  m.def("moe_combine(Tensor rows, Tensor row_pos, Tensor weights) -> Tensor");
}

TORCH_LIBRARY_IMPL(moeserve, CPU, m) {
  m.impl("softmax_topk", &softmax_topk);
  m.impl("moe_gather", &moe_gather);
  m.impl("moe_combine", &moe_combine);
}
