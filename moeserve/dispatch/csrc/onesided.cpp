// moeserve_dispatch: the one-sided protocol's tensor work (moeserve/dispatch/onesided.py) in a few calls,
// one per phase, instead of a few dozen torch ops: at decode sizes each op's fixed cost, not the bytes,
// is the latency. The torch path (onesided_plan.py) is the reference; every result here is bit for bit
// the same (tests/dispatch/test_onesided_plan.py): rows are copied as bytes, products and sums are the
// same fp32 operations in the same order (built with -ffp-contract=off: no fused multiply-adds).
// Large calls (a prefill) split their row copies and sums over torch's intra-op threads; each row is
// computed the same way on any thread, so the bits do not depend on the thread count.
//
// A rank's rows for itself never leave it: its own block in its own region is read by nobody else, so
// send writes only their slots and weights there (not the hidden rows), expand copies those rows from
// the dispatched hidden itself, partial skips the rank's own partial rows and total computes them in
// place (the same fp32 products and sums in the same order, so the same bits). What peers write and read
// is unchanged: so is the protocol. me = -1 turns this off (every row through the blocks).
//
// # T tokens, k top-k, H hidden, W ranks, M rows per (source, destination) block, S local slots,
// # n grid rows per source (the largest received count), R expert rows
//
// send:    ids [T, k] int32/int64 slots (-1 dropped) -> writes, for every destination d, one row
//          per token with a slot on d into fan_hidden/fan_slots/fan_weights [W, M, *] (views of d's
//          block of this source, any stride between destinations) in token order, but no hidden rows
//          for d = me; returns counts [W] int64, back_index [T, k] int64 (d * M + row at (t, first j
//          on d), else W * M) and own [counts[me]] int64 (the token of each row this rank sent itself).
//          An id outside [-1, W * slots_per_rank) writes nothing and returns counts all -1 (the caller
//          words the error; checking here saves the separate min/max pass over the ids).
//          Placed (placed_start [W, S] given, from placed_start below): the hidden rows go instead to
//          fan_placed [W, rows, H] (every destination's ExpertBatch), one per (t, j) on d at row
//          placed_start[d][e]++, this rank's own included; slots and weights as above.
// expand:  this rank's blocks slots [W, M, k], hidden [W, M, H], weights [W, M, k] and counts [W]
//          (source me's hidden rows: own_hidden[own[r]]) -> ExpertBatch rows [R, H] (slot-major, then
//          (source, row, j) order), per-slot counts [S] int64, offsets [S] int32, term_index [W * n, k]
//          int64 (ExpertBatch row at (q, j), R where none), row_weights [R]. Placed (placed [rows, H]
//          given: this rank's ExpertBatch rows, where the senders wrote them): rows is placed[:R], no copy.
//          Else rows is scratch[:R] where scratch [>= R, H] of hidden's dtype is given, else a new tensor.
// partial: out [W, n, H] fp32 (any strides: the sources' partial blocks) row q = sum over j in order of
//          float(y[term_index[q, j]]) * float(w[...]), started from 0. A row with no term (all R: past
//          its source's count, a stale grid row no source reads) is not written, nor are source me's.
// publish: an expert rank's combine when its output is read in place (offset >= 0: the output's byte offset
//          in its own region), or its word that it sent partial rows (offset -1): for every source s,
//          offset into word 0 of fan_terms[s] (this rank's row of s's terms block) and, reading in place,
//          term_index rows [s * n, s * n + counts[s]) after it.
// total:   partials [P, H] fp32 (last row zeros), back_index [T, k] -> [T, H] in out_dtype (the payload's,
//          or fp32: hierarchical dispatch's host partials), the sum in j order started from 0, then rounded
//          once (round to nearest even) to out_dtype. Rows read in place are in y's dtype (the payload's), or
//          out_dtype where y is not given. Partial row
//          own_lo + r (r < n: this rank's own) is partial's row q = me * n + r, computed here from y.
//          terms [W, 1 + M * k] (this rank's terms block; empty: every rank sent partials): an expert rank
//          d whose word 0 is >= 0 published its output in place, at regions[d] + word 0 (regions: every
//          region's address in this process). Its terms are then local's, read where they lie: position
//          j of token t (ids [T, k], on d) adds float(row) * float(weights[t, j]) in j order, the row
//          found through the term index d published for the row this rank sent it (back_index at t's
//          first position on d). Where every rank did, the result is local's bit for bit.
//
// route_counts: ids [T, k] -> this source's top-k positions per (destination, slot), [W * S], into
//          fan_counts [W, W * S] (its row of every rank's counts), or -1s where an id is out of range or
//          `bad` is given; returns 0 then, else 1.
// placed_start: every source's counts [W, W, S] -> (bad [W], start [W, S]; start empty unless every
//          destination's rows fit `capacity` and no source flagged bad routing).
//
// The shm heap's flags (shm_heap.py: regions at a fixed stride in one mapping, each after a header whose
// word 2 is `asleep`; a row of W flags is followed by its bell word), without a Python loop per peer:
// signal:  for every destination d from me + 1 round the ring: counts[d] and bad (none if counts is
//          empty) into this source's meta words at byte meta_off of d's region; a full fence (every
//          earlier store of this thread, non-temporal ones included, and those of the threads it
//          joined, before the flags); the epoch into d's flag `me` of the row at byte `row`; a full
//          fence; then each d (not me) found asleep with its whole row up gets the epoch in its bell
//          and one futex wake (shm_heap.py's notify, for every peer in one call).
// poll:    until the W flags at `address` (this rank's row) all hold epoch: spin for spin_s, then
//          sched_yield until yield_s (seconds since the call); true when they do, false when time ran
//          out (the caller goes on to sleep, check for dead peers and time out: flag_wait.py).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

namespace {

template <typename F>
void with_int(const at::Tensor& t, F&& f) {
  switch (t.scalar_type()) {
    case at::kByte: f((const uint8_t*)nullptr); break;
    case at::kChar: f((const int8_t*)nullptr); break;
    case at::kShort: f((const int16_t*)nullptr); break;
    case at::kInt: f((const int32_t*)nullptr); break;
    case at::kLong: f((const int64_t*)nullptr); break;
    default: TORCH_CHECK(false, "moeserve_dispatch: integer tensor expected, got ", t.scalar_type());
  }
}

template <typename F>
void with_float(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat: f((const float*)nullptr); break;
    case at::kBFloat16: f((const c10::BFloat16*)nullptr); break;
    case at::kHalf: f((const c10::Half*)nullptr); break;
    default: TORCH_CHECK(false, "moeserve_dispatch: fp32, bf16 or fp16 expected, got ", t);
  }
}

int64_t grain(int64_t bytes_per_row) {  // rows per task: ~256 KB, so decode-sized calls stay on one thread
  return std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, bytes_per_row));
}

std::vector<int64_t> as_int64(const at::Tensor& ids) {  // a contiguous integer tensor's values, in order
  std::vector<int64_t> id(ids.numel());
  with_int(ids, [&](auto tag) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const I* p = ids.data_ptr<I>();
    for (size_t i = 0; i < id.size(); ++i) id[i] = (int64_t)p[i];
  });
  return id;
}

char* row_ptr(const at::Tensor& t, int64_t a, int64_t b) {  // &t[a][b][0] of a [A, B, C] view
  return (char*)t.data_ptr() + (a * t.stride(0) + b * t.stride(1)) * t.element_size();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> send(const at::Tensor& hidden, const at::Tensor& ids,
                                                    const at::Tensor& weights, int64_t slots_per_rank,
                                                    const at::Tensor& fan_hidden, const at::Tensor& fan_slots,
                                                    const at::Tensor& fan_weights, int64_t me,
                                                    const at::Tensor& placed_start, const at::Tensor& fan_placed) {
  TORCH_CHECK(hidden.is_contiguous() && ids.is_contiguous() && weights.is_contiguous());
  TORCH_CHECK(fan_hidden.stride(2) == 1 && fan_slots.stride(2) == 1 && fan_weights.stride(2) == 1);
  const int64_t T = ids.size(0), k = ids.size(1), W = fan_hidden.size(0), M = fan_hidden.size(1);
  const int64_t row_bytes = hidden.size(1) * hidden.element_size(), w_bytes = k * weights.element_size();
  auto counts = at::zeros({W}, at::kLong);
  auto back = at::full({T, k}, W * M, at::kLong);
  int64_t* cnt = counts.data_ptr<int64_t>();
  int64_t* bk = back.data_ptr<int64_t>();
  const std::vector<int64_t> id = as_int64(ids);
  for (int64_t i = 0; i < T * k; ++i)
    if (id[i] < -1 || id[i] >= W * slots_per_rank) return {counts.fill_(-1), back, at::empty({0}, at::kLong)};
  const bool placed = placed_start.numel() > 0;
  TORCH_CHECK(!placed || (placed_start.scalar_type() == at::kLong && placed_start.is_contiguous() &&
                          placed_start.numel() == W * slots_per_rank && fan_placed.size(0) == W &&
                          fan_placed.stride(2) == 1 && fan_placed.size(2) == hidden.size(1)),
              "moeserve_dispatch: send's placed rows do not match");
  std::vector<int64_t> next;  // placed: the ExpertBatch row of d's slot e that this source writes next
  if (placed) next.assign(placed_start.data_ptr<int64_t>(), placed_start.data_ptr<int64_t>() + W * slots_per_rank);
  std::vector<int64_t> sent;  // (d, r, t) of every row, in order; the copies run in parallel below
  std::vector<int64_t> placed_at;  // placed: (d, ExpertBatch row, t) of every hidden row
  std::vector<int64_t> own;  // the token of each row for d = me
  with_int(fan_slots, [&](auto tag) {
    using L = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    for (int64_t d = 0; d < W; ++d) {
      int64_t r = 0;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t* row = &id[t * k];
        int64_t first = -1;
        for (int64_t j = 0; j < k; ++j)
          if (row[j] >= 0 && row[j] / slots_per_rank == d) { first = j; break; }
        if (first < 0) continue;
        TORCH_CHECK(r < M, "moeserve_dispatch: more rows than the block holds");
        L* sl = (L*)row_ptr(fan_slots, d, r);
        for (int64_t j = 0; j < k; ++j) {
          const bool here = row[j] >= 0 && row[j] / slots_per_rank == d;
          sl[j] = (L)(here ? row[j] % slots_per_rank : -1);
          if (placed && here) {
            int64_t& i = next[row[j]];  // d * slots_per_rank + e
            TORCH_CHECK(i < fan_placed.size(1), "moeserve_dispatch: more rows than the ExpertBatch holds");
            placed_at.insert(placed_at.end(), {d, i++, t});
          }
        }
        bk[t * k + first] = d * M + r;
        sent.insert(sent.end(), {d, r, t});
        if (d == me) own.push_back(t);
        ++r;
      }
      cnt[d] = r;
    }
  });
  const char* hid = (const char*)hidden.data_ptr();
  const char* wts = (const char*)weights.data_ptr();
  at::parallel_for(0, (int64_t)sent.size() / 3, grain(row_bytes), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t d = sent[3 * i], r = sent[3 * i + 1], t = sent[3 * i + 2];
      if (d != me && !placed) std::memcpy(row_ptr(fan_hidden, d, r), hid + t * row_bytes, row_bytes);
      std::memcpy(row_ptr(fan_weights, d, r), wts + t * w_bytes, w_bytes);
    }
  });
  at::parallel_for(0, (int64_t)placed_at.size() / 3, grain(row_bytes), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      std::memcpy(row_ptr(fan_placed, placed_at[3 * i], placed_at[3 * i + 1]), hid + placed_at[3 * i + 2] * row_bytes,
                  row_bytes);
  });
  auto own_tokens = at::empty({(int64_t)own.size()}, at::kLong);
  std::copy(own.begin(), own.end(), own_tokens.data_ptr<int64_t>());
  return {counts, back, own_tokens};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> expand(
    const at::Tensor& slots, const at::Tensor& hidden, const at::Tensor& weights, std::vector<int64_t> counts,
    int64_t num_slots, int64_t me, const at::Tensor& own_hidden, const at::Tensor& own, const at::Tensor& placed,
    const at::Tensor& scratch) {
  TORCH_CHECK(slots.is_contiguous() && hidden.is_contiguous() && weights.is_contiguous());
  const int64_t W = slots.size(0), M = slots.size(1), k = slots.size(2), H = hidden.size(2);
  TORCH_CHECK(me < 0 || (own_hidden.is_contiguous() && own_hidden.dtype() == hidden.dtype() &&
                         own_hidden.size(1) == H && own.is_contiguous() && own.numel() == counts[me]),
              "moeserve_dispatch: expand's own rows do not match the blocks");
  int64_t n = 0;
  for (int64_t c : counts) n = std::max(n, c);
  std::vector<int64_t> per(num_slots + 1, 0);
  with_int(slots, [&](auto tag) {
    using L = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const L* s = slots.data_ptr<L>();
    for (int64_t w = 0; w < W; ++w)
      for (int64_t r = 0; r < counts[w]; ++r)
        for (int64_t j = 0; j < k; ++j) {
          int64_t v = s[(w * M + r) * k + j];
          if (v >= 0) ++per[v + 1];
        }
  });
  auto slot_counts = at::empty({num_slots}, at::kLong);
  auto offsets = at::empty({num_slots}, at::kInt);
  std::vector<int64_t> next(num_slots);
  for (int64_t e = 0; e < num_slots; ++e) {
    slot_counts.data_ptr<int64_t>()[e] = per[e + 1];
    next[e] = per[e];
    per[e + 1] += per[e];
    offsets.data_ptr<int32_t>()[e] = (int32_t)per[e + 1];
  }
  const int64_t R = per[num_slots];
  const bool is_placed = placed.numel() > 0;  // the senders wrote the rows where they belong
  TORCH_CHECK(!is_placed || (placed.is_contiguous() && placed.dim() == 2 && placed.size(1) == H &&
                             placed.size(0) >= R && placed.dtype() == hidden.dtype()),
              "moeserve_dispatch: expand's placed rows do not match");
  // not placed: the rows are copied into the caller's scratch where it holds them (the shm dispatcher's
  // rows block: no allocation, and an identity expert's output then lies where combine reads it in place)
  const bool fits = scratch.numel() && scratch.is_contiguous() && scratch.dim() == 2 && scratch.size(1) == H &&
                    scratch.size(0) >= R && scratch.dtype() == hidden.dtype();
  auto rows = is_placed ? placed.narrow(0, 0, R) : fits ? scratch.narrow(0, 0, R) : at::empty({R, H}, hidden.options());
  auto row_weights = at::empty({R}, weights.options());
  auto term_index = at::full({W * n, k}, R, at::kLong);
  const int64_t row_bytes = H * hidden.element_size(), wsz = weights.element_size();
  int64_t* ti = term_index.data_ptr<int64_t>();
  std::vector<int64_t> from(R);  // (w * M + r) * k + j of ExpertBatch row i; the copies run in parallel below
  with_int(slots, [&](auto tag) {
    using L = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const L* s = slots.data_ptr<L>();
    for (int64_t w = 0; w < W; ++w)
      for (int64_t r = 0; r < counts[w]; ++r)
        for (int64_t j = 0; j < k; ++j) {
          int64_t v = s[(w * M + r) * k + j];
          if (v < 0) continue;
          int64_t i = next[v]++;
          from[i] = (w * M + r) * k + j;
          ti[(w * n + r) * k + j] = i;
        }
  });
  char* out_rows = (char*)rows.data_ptr();
  char* out_w = (char*)row_weights.data_ptr();
  const char* hid = (const char*)hidden.data_ptr();
  const char* wts = (const char*)weights.data_ptr();
  const char* own_hid = me < 0 ? nullptr : (const char*)own_hidden.data_ptr();
  const int64_t* own_t = me < 0 ? nullptr : own.data_ptr<int64_t>();
  at::parallel_for(0, R, grain(row_bytes), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t q = from[i] / k;  // w * M + r
      if (!is_placed) {
        const char* src = q / M == me ? own_hid + own_t[q % M] * row_bytes : hid + q * row_bytes;
        std::memcpy(out_rows + i * row_bytes, src, row_bytes);
      }
      std::memcpy(out_w + i * wsz, wts + from[i] * wsz, wsz);
    }
  });
  return {rows, slot_counts, offsets, term_index, row_weights};
}

// One partial row: acc = the sum over j in order of float(y[terms[j]]) * float(w[terms[j]]), started
// from 0, skipping terms >= R. partial writes it to the source; total uses it for this rank's own rows.
template <typename Y, typename V>
void partial_row(const int64_t* terms, int64_t k, int64_t R, const Y* yp, const V* wp, int64_t H, float* acc) {
  std::fill(acc, acc + H, 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = terms[j];
    if (i >= R) continue;
    const float w = (float)wp[i];
    const Y* src = yp + i * H;
    for (int64_t h = 0; h < H; ++h) acc[h] += (float)src[h] * w;
  }
}

void partial(const at::Tensor& y, const at::Tensor& row_weights, const at::Tensor& term_index, const at::Tensor& out,
             int64_t me) {
  TORCH_CHECK(y.is_contiguous() && row_weights.is_contiguous() && term_index.is_contiguous());
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.stride(2) == 1);
  const int64_t R = y.size(0), H = y.size(1), k = term_index.size(1), n = out.size(1);
  const int64_t* ti = term_index.data_ptr<int64_t>();
  with_float(y.scalar_type(), [&](auto ytag) {
    using Y = std::remove_const_t<std::remove_pointer_t<decltype(ytag)>>;
    with_float(row_weights.scalar_type(), [&](auto wtag) {
      using V = std::remove_const_t<std::remove_pointer_t<decltype(wtag)>>;
      const Y* yp = y.data_ptr<Y>();
      const V* wp = row_weights.data_ptr<V>();
      // rows are independent and each is summed the same way on any thread: bits do not depend on threads
      at::parallel_for(0, term_index.size(0), grain(H * 4 * k), [&](int64_t lo, int64_t hi) {
        std::vector<float> acc(H);
        for (int64_t q = lo; q < hi; ++q) {
          const int64_t* terms = ti + q * k;
          if (q / n == me) continue;  // this rank's own: total sums them in place
          if (std::all_of(terms, terms + k, [&](int64_t i) { return i >= R; })) continue;  // a stale row
          partial_row(terms, k, R, yp, wp, H, acc.data());
          std::memcpy(row_ptr(out, q / n, q % n), acc.data(), H * sizeof(float));
        }
      });
    });
  });
}

// What a source reads of this expert rank's combine, into its terms block (see the header): the output's
// byte offset (-1: partials were sent), then the output row of each of the source's rows at each position.
void publish(const at::Tensor& term_index, std::vector<int64_t> counts, int64_t n, const at::Tensor& fan_terms,
             int64_t offset) {
  TORCH_CHECK(term_index.is_contiguous() && term_index.scalar_type() == at::kLong && fan_terms.dim() == 2 &&
              fan_terms.stride(1) == 1 && fan_terms.scalar_type() == at::kLong);
  const int64_t W = fan_terms.size(0), k = term_index.size(1);
  TORCH_CHECK((int64_t)counts.size() == W && term_index.size(0) == W * n,
              "moeserve_dispatch: publish's terms do not match");
  const int64_t* ti = term_index.data_ptr<int64_t>();
  for (int64_t s = 0; s < W; ++s) {
    int64_t* dst = fan_terms.data_ptr<int64_t>() + s * fan_terms.stride(0);
    dst[0] = offset;
    if (offset < 0 || counts[s] == 0) continue;
    TORCH_CHECK(1 + counts[s] * k <= fan_terms.size(1), "moeserve_dispatch: more terms than the block holds");
    std::memcpy(dst + 1, ti + s * n * k, counts[s] * k * sizeof(int64_t));
  }
}

at::Tensor total(const at::Tensor& partials, const at::Tensor& back_index, at::ScalarType out_dtype, int64_t own_lo,
                 int64_t own_rows, int64_t own_q0, const at::Tensor& y, const at::Tensor& row_weights,
                 const at::Tensor& term_index, const at::Tensor& ids, int64_t slots_per_rank,
                 const at::Tensor& weights, const at::Tensor& terms, const at::Tensor& regions, int64_t region_bytes) {
  TORCH_CHECK(partials.is_contiguous() && back_index.is_contiguous() && partials.scalar_type() == at::kFloat);
  const int64_t T = back_index.size(0), k = back_index.size(1), H = partials.size(1);
  const int64_t zero = partials.size(0) - 1;
  TORCH_CHECK(own_lo < 0 || (y.is_contiguous() && row_weights.is_contiguous() && term_index.is_contiguous() &&
                             y.size(1) == H && term_index.size(1) == k),
              "moeserve_dispatch: total's own rows do not match the partials");
  // partial rows [own_lo, own_end) are partial's rows own_q0, own_q0 + 1, ... (none where own_lo < 0)
  const int64_t own_end = own_lo < 0 ? -1 : own_lo + own_rows, R = own_lo < 0 ? 0 : y.size(0);
  const int64_t* ti = own_lo < 0 ? nullptr : term_index.data_ptr<int64_t>();
  const int64_t* bi = back_index.data_ptr<int64_t>();
  const float* pp = partials.data_ptr<float>();
  // the expert ranks that published their output in place (terms given): where it starts, else nullptr
  const bool any_terms = terms.numel() > 0;
  const int64_t W = any_terms ? terms.size(0) : 0, M = any_terms ? (terms.size(1) - 1) / k : 0;
  TORCH_CHECK(!any_terms || (terms.is_contiguous() && terms.scalar_type() == at::kLong && regions.numel() == W &&
                             regions.scalar_type() == at::kLong && ids.is_contiguous() && ids.numel() == T * k &&
                             weights.is_contiguous() && weights.numel() == T * k && zero == W * M),
              "moeserve_dispatch: total's terms do not match");
  std::vector<const char*> at_rank(W, nullptr);
  std::vector<int64_t> room(W, 0);  // bytes of d's region from its output on: rows past it are refused
  for (int64_t d = 0; d < W; ++d) {
    const int64_t offset = terms.data_ptr<int64_t>()[d * terms.size(1)];
    if (offset < 0) continue;
    at_rank[d] = (const char*)regions.data_ptr<int64_t>()[d] + offset;
    room[d] = region_bytes - offset;
  }
  const bool direct = std::any_of(at_rank.begin(), at_rank.end(), [](const char* p) { return p != nullptr; });
  // the slot ids as int64, where any rank's output is read in place
  const std::vector<int64_t> id = direct ? as_int64(ids) : std::vector<int64_t>();
  auto out = at::empty({T, H}, partials.options().dtype(out_dtype));
  with_float(out_dtype, [&](auto otag) {
    using O = std::remove_const_t<std::remove_pointer_t<decltype(otag)>>;
    // Y: y's dtype, also the in-place rows' (the payload's); without y (own_lo < 0) the output's
    with_float(own_lo < 0 ? out_dtype : y.scalar_type(), [&](auto ytag) {
      using Y = std::remove_const_t<std::remove_pointer_t<decltype(ytag)>>;
      with_float(own_lo < 0 ? at::kFloat : row_weights.scalar_type(), [&](auto wtag) {
        using V = std::remove_const_t<std::remove_pointer_t<decltype(wtag)>>;
        with_float(direct ? weights.scalar_type() : at::kFloat, [&](auto ttag) {
          using TW = std::remove_const_t<std::remove_pointer_t<decltype(ttag)>>;
          const Y* yp = own_lo < 0 ? nullptr : y.data_ptr<Y>();
          const V* wp = own_lo < 0 ? nullptr : row_weights.data_ptr<V>();
          const TW* tw = direct ? weights.data_ptr<TW>() : nullptr;
          const int64_t* tm = any_terms ? terms.data_ptr<int64_t>() : nullptr;
          const int64_t row_bytes = H * (int64_t)sizeof(Y);
          O* op = out.data_ptr<O>();
          at::parallel_for(0, T, grain(H * 4 * k), [&](int64_t lo, int64_t hi) {
            std::vector<float> acc(H), mine(H);
            for (int64_t t = lo; t < hi; ++t) {
              std::fill(acc.begin(), acc.end(), 0.0f);
              for (int64_t j = 0; j < k; ++j) {
                int64_t first = j, d = -1;  // the token's first top-k position on the rank of position j
                if (direct) {
                  const int64_t v = id[t * k + j];
                  if (v < 0) continue;
                  d = v / slots_per_rank;
                  for (int64_t jj = 0; jj < j; ++jj)
                    if (id[t * k + jj] >= 0 && id[t * k + jj] / slots_per_rank == d) { first = jj; break; }
                }
                const int64_t i = bi[t * k + first];
                if (d >= 0 && at_rank[d] != nullptr) {  // local's term: float(y) * float(w), in j order
                  const int64_t row = tm[d * (1 + M * k) + 1 + (i - d * M) * k + j];
                  TORCH_CHECK(row >= 0 && (row + 1) * row_bytes <= room[d],
                              "moeserve_dispatch: an expert row outside its rank's region");
                  const Y* src = (const Y*)(at_rank[d] + row * row_bytes);
                  const float w = (float)tw[t * k + j];
                  for (int64_t h = 0; h < H; ++h) acc[h] += (float)src[h] * w;
                  continue;
                }
                if (first != j || i == zero) continue;  // a rank's partial goes at its first position
                if (i >= own_lo && i < own_end) {  // as partial would have summed it: the same fp32 bits
                  partial_row(ti + (own_q0 + i - own_lo) * k, k, R, yp, wp, H, mine.data());
                  for (int64_t h = 0; h < H; ++h) acc[h] += mine[h];
                  continue;
                }
                const float* src = pp + i * H;
                for (int64_t h = 0; h < H; ++h) acc[h] += src[h];
              }
              for (int64_t h = 0; h < H; ++h) op[t * H + h] = (O)acc[h];
            }
          });
        });
      });
    });
  });
  return out;
}

int64_t route_counts(const at::Tensor& ids, int64_t slots_per_rank, const at::Tensor& fan_counts, int64_t bad) {
  TORCH_CHECK(ids.is_contiguous() && fan_counts.scalar_type() == at::kLong && fan_counts.dim() == 2 &&
              fan_counts.stride(1) == 1);
  const int64_t W = fan_counts.size(0), n = fan_counts.size(1), numel = ids.numel();
  TORCH_CHECK(n % W == 0 && n / W == slots_per_rank, "moeserve_dispatch: route_counts' rows do not match");
  std::vector<int64_t> c(n, 0);
  with_int(ids, [&](auto tag) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const I* p = ids.data_ptr<I>();
    for (int64_t i = 0; i < numel && !bad; ++i) {
      const int64_t v = (int64_t)p[i];
      if (v < -1 || v >= n) bad = 1;
      else if (v >= 0) ++c[v];
    }
  });
  if (bad) std::fill(c.begin(), c.end(), -1);
  for (int64_t d = 0; d < W; ++d)
    std::memcpy(fan_counts.data_ptr<int64_t>() + d * fan_counts.stride(0), c.data(), n * sizeof(int64_t));
  return bad ? 0 : 1;
}

// Every source's counts [W source, W destination, S] (this rank's copy, after the counts round) ->
// (bad [W] int64: 1 where the source flagged bad routing, start [W, S] int64: the ExpertBatch row of
// each destination's slot e at which source me's rows start, or empty where some destination's rows would
// pass `capacity`: the call goes through the blocks).
std::tuple<at::Tensor, at::Tensor> placed_start(const at::Tensor& counts, int64_t me, int64_t capacity) {
  TORCH_CHECK(counts.is_contiguous() && counts.scalar_type() == at::kLong && counts.dim() == 3);
  const int64_t W = counts.size(0), S = counts.size(2);
  const int64_t* c = counts.data_ptr<int64_t>();
  auto bad = at::zeros({W}, at::kLong);
  bool any_bad = false;
  for (int64_t s = 0; s < W; ++s)
    if (c[s * W * S] < 0) bad.data_ptr<int64_t>()[s] = 1, any_bad = true;
  auto start = at::zeros({W, S}, at::kLong);
  if (any_bad) return {bad, at::empty({0}, at::kLong)};
  int64_t* st = start.data_ptr<int64_t>();
  for (int64_t d = 0; d < W; ++d) {
    int64_t row = 0;  // slot-major, then source
    for (int64_t e = 0; e < S; ++e)
      for (int64_t s = 0; s < W; ++s) {
        if (s == me) st[d * S + e] = row;
        row += c[(s * W + d) * S + e];
      }
    if (row > capacity) return {bad, at::empty({0}, at::kLong)};
  }
  return {bad, start};
}

int64_t* word(int64_t base, int64_t stride, int64_t header, int64_t rank, int64_t offset) {
  return (int64_t*)(base + rank * stride + header + offset);
}

void signal(int64_t base, int64_t stride, int64_t header, int64_t asleep_offset, int64_t me, int64_t world,
            int64_t meta_off, const at::Tensor& counts, int64_t bad, int64_t row, int64_t epoch) {
  TORCH_CHECK(counts.numel() == 0 || (counts.scalar_type() == at::kLong && counts.numel() == world));
  if (counts.numel()) {
    const int64_t* c = counts.contiguous().data_ptr<int64_t>();
    for (int64_t i = 1; i <= world; ++i) {
      const int64_t d = (me + i) % world;
      __atomic_store_n(word(base, stride, header, d, meta_off), c[d], __ATOMIC_RELAXED);
      __atomic_store_n(word(base, stride, header, d, meta_off + 8), bad, __ATOMIC_RELAXED);
    }
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // mfence: rows and meta before any flag
  for (int64_t i = 1; i <= world; ++i)
    __atomic_store_n(word(base, stride, header, (me + i) % world, row + 8 * me), epoch, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our flags before our loads of the peers' asleep words and rows
  for (int64_t i = 1; i < world; ++i) {
    const int64_t d = (me + i) % world;
    if (!__atomic_load_n((int64_t*)(base + d * stride + asleep_offset), __ATOMIC_RELAXED)) continue;
    int64_t* flags = word(base, stride, header, d, row);
    bool up = true;
    for (int64_t s = 0; s < world && up; ++s) up = __atomic_load_n(flags + s, __ATOMIC_RELAXED) == epoch;
    if (!up) continue;  // a later writer completes the row and wakes it
    __atomic_store_n(flags + world, epoch, __ATOMIC_RELAXED);
    syscall(SYS_futex, (int32_t*)(flags + world), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

bool poll(int64_t address, int64_t count, int64_t epoch, double spin_s, double yield_s) {
  const int64_t* flags = (const int64_t*)address;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    bool up = true;
    for (int64_t s = 0; s < count && up; ++s) up = __atomic_load_n(flags + s, __ATOMIC_ACQUIRE) == epoch;
    if (up) return true;
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (now >= yield_s) return false;
    if (now >= spin_s) sched_yield();
  }
}

at::Tensor total_dtype(const at::Tensor& partials, const at::Tensor& back_index, const at::Tensor& like,
                       int64_t own_lo, int64_t own_rows, int64_t own_q0, const at::Tensor& y,
                       const at::Tensor& row_weights, const at::Tensor& term_index, const at::Tensor& ids,
                       int64_t slots_per_rank, const at::Tensor& weights, const at::Tensor& terms,
                       const at::Tensor& regions, int64_t region_bytes) {
  return total(partials, back_index, like.scalar_type(), own_lo, own_rows, own_q0, y, row_weights, term_index, ids,
               slots_per_rank, weights, terms, regions, region_bytes);
}

}  // namespace

TORCH_LIBRARY(moeserve_dispatch, m) {
  m.def("send", &send);
  m.def("expand", &expand);
  m.def("partial", &partial);
  m.def("publish", &publish);
  m.def("total", &total_dtype);
  m.def("route_counts", &route_counts);
  m.def("placed_start", &placed_start);
  m.def("signal", &signal);
  m.def("poll", &poll);
}
