#include "support/problem.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace sdpa::test {
namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon();
constexpr double kSafety = 2.0;
}  // namespace

std::string Problem::describe() const {
  std::ostringstream os;
  os << "B=" << b << " H=" << h << " Hkv=" << h_kv << " Nq=" << n_q << " Nkv=" << n_kv << " d=" << d << " dv=" << dv
     << (causal ? " causal" : "") << " layout=" << (layout == Layout::bhsd ? "bhsd" : "bshd") << " row_pad=" << row_pad
     << " isa=" << isa_name(isa) << " threads=" << threads << " seed=" << seed;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Problem& pb) { return os << pb.describe(); }

namespace {

// A 4-D view of [B, heads, N, width] data stored in the problem's layout, rows
// padded by row_pad elements.
TensorView make_view(const void* data, DType dt, const Problem& pb, std::int64_t heads, std::int64_t n,
                     std::int64_t width) {
  TensorView t = TensorView::contiguous(data, dt, {pb.b, heads, n, width});
  const std::int64_t row = width + pb.row_pad;
  if (pb.layout == Layout::bhsd) {
    t.stride = {heads * n * row, n * row, row, 1};
  } else {
    t.stride = {n * heads * row, row, heads * row, 1};
  }
  return t;
}

std::int64_t elems(const Problem& pb, std::int64_t heads, std::int64_t n, std::int64_t width) {
  return pb.b * heads * n * (width + pb.row_pad);
}

}  // namespace

Buffers::Buffers(const Problem& p) : pb(p) {
  std::mt19937_64 rng(pb.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, std::int64_t n) {
    x.resize(static_cast<std::size_t>(n));
    for (float& e : x) e = normal(rng);
  };
  fill(q, elems(pb, pb.h, pb.n_q, pb.d));
  fill(k, elems(pb, pb.h_kv, pb.n_kv, pb.d));
  fill(v, elems(pb, pb.h_kv, pb.n_kv, pb.dv));
  // Outputs start as NaN so an element the kernels forget to write is caught.
  o.assign(static_cast<std::size_t>(elems(pb, pb.h, pb.n_q, pb.dv)), std::nanf(""));
  o_ref.assign(o.size(), std::nan(""));
  lse.assign(static_cast<std::size_t>(pb.b * pb.h * pb.n_q), std::nanf(""));
  lse_ref.assign(lse.size(), std::nan(""));
}

std::int64_t Buffers::q_elems() const { return static_cast<std::int64_t>(q.size()); }
TensorView Buffers::q_view() const { return make_view(q.data(), DType::f32, pb, pb.h, pb.n_q, pb.d); }
TensorView Buffers::k_view() const { return make_view(k.data(), DType::f32, pb, pb.h_kv, pb.n_kv, pb.d); }
TensorView Buffers::v_view() const { return make_view(v.data(), DType::f32, pb, pb.h_kv, pb.n_kv, pb.dv); }
TensorView Buffers::o_view() { return make_view(o.data(), DType::f32, pb, pb.h, pb.n_q, pb.dv); }
TensorView Buffers::o_ref_view() { return make_view(o_ref.data(), DType::f64, pb, pb.h, pb.n_q, pb.dv); }
TensorView Buffers::lse_view() { return TensorView::contiguous(lse.data(), {pb.b, pb.h, pb.n_q}); }
TensorView Buffers::lse_ref_view() { return TensorView::contiguous(lse_ref.data(), {pb.b, pb.h, pb.n_q}); }

std::int64_t Buffers::o_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) const {
  const TensorView t = make_view(o.data(), DType::f32, pb, pb.h, pb.n_q, pb.dv);
  return b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + c;
}

Options Buffers::options() const {
  Options opt = base;
  opt.isa = pb.isa;
  opt.threads = pb.threads;
  opt.causal = pb.causal;
  return opt;
}

void Buffers::run_fast(bool with_lse, bool with_probs) {
  Options opt = options();
  if (with_lse) opt.lse = lse_view();
  if (with_probs) {
    probs.assign(static_cast<std::size_t>(pb.b * pb.h * pb.n_q * pb.n_kv), std::nanf(""));
    opt.probs = TensorView::contiguous(probs.data(), {pb.b, pb.h, pb.n_q, pb.n_kv});
  }
  attention(q_view(), k_view(), v_view(), o_view(), opt);
}

void Buffers::run_reference(bool with_lse, bool with_probs) {
  Options opt = options();
  if (with_lse) opt.lse = lse_ref_view();
  if (with_probs) {
    probs_ref.assign(static_cast<std::size_t>(pb.b * pb.h * pb.n_q * pb.n_kv), std::nan(""));
    opt.probs = TensorView::contiguous(probs_ref.data(), {pb.b, pb.h, pb.n_q, pb.n_kv});
  }
  reference_attention(q_view(), k_view(), v_view(), o_ref_view(), opt);
}

std::string Worst::describe() const {
  std::ostringstream os;
  os << "worst |err| = " << err << " at (b=" << b << ", h=" << h << ", i=" << i << ", c=" << c << "): got " << got
     << ", want " << want;
  return os.str();
}

namespace {
// NaN-aware difference: equal NaNs / equal infinities count as exact.
double diff(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0.0 : INFINITY;
  if (std::isinf(got) || std::isinf(want)) return got == want ? 0.0 : INFINITY;
  return std::abs(got - want);
}
}  // namespace

Worst worst_o(const Buffers& buf) {
  const Problem& pb = buf.pb;
  Worst w;
  w.err = -1;
  for (std::int64_t b = 0; b < pb.b; ++b)
    for (std::int64_t h = 0; h < pb.h; ++h)
      for (std::int64_t i = 0; i < pb.n_q; ++i)
        for (std::int64_t c = 0; c < pb.dv; ++c) {
          const std::int64_t at = buf.o_index(b, h, i, c);
          const double e = diff(buf.o[at], buf.o_ref[at]);
          if (e > w.err) w = {e, b, h, i, c, buf.o[at], buf.o_ref[at]};
        }
  if (w.err < 0) w.err = 0;
  return w;
}

Worst worst_lse(const Buffers& buf) {
  const Problem& pb = buf.pb;
  Worst w;
  w.err = -1;
  for (std::int64_t b = 0; b < pb.b; ++b)
    for (std::int64_t h = 0; h < pb.h; ++h)
      for (std::int64_t i = 0; i < pb.n_q; ++i) {
        const std::int64_t at = (b * pb.h + h) * pb.n_q + i;
        const double e = diff(buf.lse[at], buf.lse_ref[at]);
        if (e > w.err) w = {e, b, h, i, 0, buf.lse[at], buf.lse_ref[at]};
      }
  if (w.err < 0) w.err = 0;
  return w;
}

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, static_cast<double>(std::abs(e)));
  return m;
}

static double score_error(const Problem& pb, double max_abs_q, double max_abs_k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(pb.d));
  return (pb.d + 1) * kEps * scale * max_abs_q * max_abs_k;
}

double tolerance_o(const Problem& pb, double max_abs_q, double max_abs_k, double max_abs_v) {
  const double ds = score_error(pb, max_abs_q, max_abs_k);
  return kSafety * max_abs_v * (4 * ds + (pb.n_kv + 4) * kEps);
}

double tolerance_lse(const Problem& pb, double max_abs_q, double max_abs_k) {
  // Plus one rounding of the float result, whose size is at most the largest score plus log(Nkv).
  const double magnitude = score_error(pb, max_abs_q, max_abs_k) / ((pb.d + 1) * kEps) + std::log(pb.n_kv + 1.0);
  return kSafety * (score_error(pb, max_abs_q, max_abs_k) + (pb.n_kv + 4) * kEps + magnitude * kEps);
}

std::vector<float> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& e : x) e = normal(rng);
  return x;
}

}  // namespace sdpa::test
