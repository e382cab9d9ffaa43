// The backward: sdpa::attention_backward / reference_attention_backward and
// attention_varlen_backward (fast path and oracle) through every Options
// member the backward takes (scale, causal, align, offsets, key lengths,
// windows, bool and float masks broadcast, ALiBi, softcap, sinks with dsinks,
// dropout probability, seed and offset, threads, isa), on dense views (bhsd,
// bshd, padded, negative or zero strides) and packed rows, with GQA and 0-sized
// and odd shapes; gradient views of the wrong shape or dtype, with null data,
// unset, or overlapping an input or another gradient; NaN, Inf and huge values
// in the data, and o/lse that no forward wrote.
//
// Every call either succeeds or throws sdpa::Error. A call that must be
// refused (a bad gradient view, a missing lse) is; a refused call writes
// nothing; no call writes an input, and the backward leaves the Options'
// optional outputs (lse, probs, scores, dropout_mask) alone. Where the fast
// forward wrote o and lse from finite data of moderate magnitude, the fast
// backward's dq, dk, dv and dsinks agree with the float64 oracle's (see kTol),
// and the fast backward gives the same bits with 1 and 3 threads.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"

namespace {

using namespace sdpa;
using fuzz::Buffer;
using fuzz::Layout;

// The fast path computes in float32 from the forward's float32 o and lse; the
// oracle recomputes everything in float64. Compared calls have inputs in
// [-4, 4) (steps of 1/32), d <= 20, dv <= 9, a scale below 10, dropout factors
// up to 1/(1-0.9) and at most a few hundred keys, so every score, dP and D
// stays far below 2^10 and each float32 product, exp and sum is off by a few
// ulps (2^-24) of terms no larger than the result's own scale. Measured with
// SDPA_FUZZ_STATS over ~3000 corpus inputs (about a million compared
// elements), the largest error as fuzz::close measures it,
// |fast - oracle| / (1 + |oracle|), was 1.3e-4 (in dK). 2e-3, the forward
// fuzzer's tolerance, is some 15 times that, room for the cancellation in
// dS = P (dP - D) on inputs not yet seen, and still far below what a real
// mistake gives (a wrong mask, a dropped key or tile, a wrong dropout
// decision: errors of order 1e-2 and more on these magnitudes).
constexpr double kTol = 2e-3;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Now and then a size off its mark (the call is then usually refused).
std::int64_t maybe_off(FuzzedDataProvider& fdp, std::int64_t v) {
  return fdp.ConsumeIntegralInRange<int>(0, 63) == 0 ? fdp.ConsumeIntegralInRange<std::int64_t>(0, 5) : v;
}

DType index_type(FuzzedDataProvider& fdp) {
  const int c = fdp.ConsumeIntegralInRange<int>(0, 15);
  return c == 0 ? DType::f32 : c < 8 ? DType::i32 : DType::i64;
}

// What every tensor of one input is made with.
struct Ctx {
  FuzzedDataProvider& fdp;
  fuzz::Rng rng{0};
  bool seeded = false;   // elements from rng (large shapes), else from the input
  bool specials = false; // somewhere a NaN, Inf, huge value or ill-conditioned option: no comparison

  Buffer make(DType t, const std::vector<std::int64_t>& shape, Layout l, bool sp, bool last_any = false) {
    return fuzz::make_buffer(fdp, t, shape, l, sp, last_any, seeded ? &rng : nullptr);
  }
  // [B, heads, N, X], in bhsd memory (the layout's strides) or in bshd memory.
  Buffer make4(DType t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t x, Layout l, bool bshd, bool sp) {
    if (!bshd) return make(t, {b, h, n, x}, l, sp);
    Buffer buf = make(t, {b, n, h, x}, l, sp);
    fuzz::swap_axes(buf, 1, 2);
    return buf;
  }
};

// The modifiers of one call; B, H, Nq, Nkv as the call sees them. `dense`:
// also the members packed calls refuse (offsets, key lengths, mask).
Options fuzz_options(Ctx& c, std::vector<Buffer>& keep, std::int64_t B, std::int64_t H, std::int64_t Nq,
                     std::int64_t Nkv, bool dense) {
  FuzzedDataProvider& fdp = c.fdp;
  Options opt;
  if (fdp.ConsumeBool()) {
    const double sc[] = {0.5, 1.0, 0.125, 0.0, -1.0, kNaN, kInf, 1e-300, 1e30, 4.0};
    opt.scale = sc[fdp.ConsumeIntegralInRange<int>(0, 9)];
    if (!(*opt.scale > 0 && *opt.scale < 10)) c.specials = true;
  }
  opt.causal = fdp.ConsumeBool();
  opt.align = fdp.ConsumeBool() ? Align::bottom_right : Align::top_left;
  if (fdp.ConsumeIntegralInRange<int>(0, 4) == 0) {
    opt.window_left = fdp.ConsumeIntegralInRange<int>(-3, 6);
    opt.window_right = fdp.ConsumeIntegralInRange<int>(-3, 6);
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const double cap[] = {1.0, 5.0, 0.01, -1.0, kNaN, kInf, 50.0};
    opt.softcap = cap[fdp.ConsumeIntegralInRange<int>(0, 6)];
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const bool per_batch = fdp.ConsumeBool();
    const bool sp = c.specials && fdp.ConsumeBool();
    keep.push_back(c.make(fdp.ConsumeIntegralInRange<int>(0, 7) ? DType::f32 : DType::f16,
                          per_batch ? std::vector<std::int64_t>{maybe_off(fdp, B), maybe_off(fdp, H)}
                                    : std::vector<std::int64_t>{maybe_off(fdp, H)},
                          Layout::any, sp, fdp.ConsumeIntegralInRange<int>(0, 3) == 0));
    opt.alibi_slopes = keep.back().view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 2) == 0) {
    keep.push_back(c.make(fdp.ConsumeIntegralInRange<int>(0, 7) ? DType::f32 : DType::f64, {maybe_off(fdp, H)},
                          Layout::any, c.specials, fdp.ConsumeIntegralInRange<int>(0, 3) == 0));
    opt.sinks = keep.back().view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 2) == 0) {
    const double ps[] = {0.1, 0.5, 0.25, 0.9, 0.0, 1e-300, 0.75, -0.1, 1.0, kNaN, kInf, -0.0};
    opt.dropout_p = ps[fdp.ConsumeIntegralInRange<int>(0, 11)];
    opt.dropout_seed = fdp.ConsumeIntegral<std::uint64_t>();
    switch (fdp.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: opt.dropout_offset = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 5); break;
      case 1: opt.dropout_offset = fdp.ConsumeIntegral<std::uint32_t>(); break;
      case 2: opt.dropout_offset = 0xFFFFFFFFu; break;
      case 3: opt.dropout_offset = std::uint64_t{1} << 32; break;
      case 4: opt.dropout_offset = fdp.ConsumeIntegral<std::uint64_t>(); break;
      default: break;
    }
  }
  const int threads[] = {1, 2, 0, 3, 1, 2, 0, 3, 1, 2, 0, 3, 1, 2, -1, 1025};
  opt.threads = threads[fdp.ConsumeIntegralInRange<int>(0, 15)];
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    const Isa isas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx, Isa::neon};
    const Isa isa = isas[fdp.ConsumeIntegralInRange<int>(0, static_cast<int>(std::size(isas)) - 1)];
    if (isa_supported(isa) || fdp.ConsumeBool()) opt.isa = isa;
  }
  if (!dense) return opt;
  if (fdp.ConsumeIntegralInRange<int>(0, 4) == 0) {
    keep.push_back(fuzz::make_int_buffer(fdp, index_type(fdp), {maybe_off(fdp, B)}, -Nkv - 1, Nkv + 1));
    opt.position_offsets = keep.back().view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 4) == 0) {
    keep.push_back(fuzz::make_int_buffer(fdp, index_type(fdp), {maybe_off(fdp, B)}, -1, Nkv + 1));
    opt.key_lengths = keep.back().view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 2) == 0) {
    const DType mt[] = {DType::boolean, DType::f32, DType::f16, DType::f64};
    const DType mdt = mt[fdp.ConsumeIntegralInRange<int>(0, 3)];
    const int mrank = fdp.ConsumeIntegralInRange<int>(1, 4);
    const std::int64_t full[4] = {B, H, Nq, Nkv};
    std::vector<std::int64_t> ms;
    for (int a = 4 - mrank; a < 4; ++a) {
      const int k = fdp.ConsumeIntegralInRange<int>(0, 7);
      ms.push_back(k <= 4 ? full[a] : k == 5 ? 1 : fdp.ConsumeIntegralInRange<std::int64_t>(0, 5));
    }
    Buffer m = c.make(mdt, ms, Layout::any, false);
    if (mdt != DType::boolean) {
      // Mostly -inf (a disabled key), 0 or a small bias; with specials also NaN and +inf.
      const std::size_t es = dtype_size(mdt);
      for (std::size_t e = 0; e * es < m.bytes.size(); ++e) {
        const int k = c.seeded ? c.rng.byte() % 4 : fdp.ConsumeIntegralInRange<int>(0, 3);
        double x = k == 0 ? -kInf : k == 1 ? 0.0 : c.seeded ? c.rng.value(c.specials) : fuzz::fuzz_value(fdp, c.specials);
        if (x == -kInf && k != 0) x = 0;  // a special drawn as a bias: only NaN, +inf, 1e30 are special here
        fuzz::store(m.bytes.data() + e * es, mdt, x);
      }
    } else if (c.seeded) {
      for (std::size_t e = 0; e < m.bytes.size(); ++e) fuzz::store(m.bytes.data() + e, mdt, c.rng.byte() % 4 != 0);
    }
    keep.push_back(std::move(m));
    opt.mask = keep.back().view;
  }
  return opt;
}

// A gradient (or dO / lse) view: memory of its own, or a view that the call
// must refuse.
enum class Kind { own, null_data, alias, unset };
struct Grad {
  Kind kind = Kind::own;
  Buffer buf;           // kind own (and the shape of null_data and alias)
  TensorView view;      // what the call gets
  int alias_grad = -1;  // alias of another gradient (0 dq, 1 dk, 2 dv): its copy's data in every copy
};

// A view a gradient may be made to overlap: an input, or gradient `grad`.
struct Target {
  const TensorView* view;
  int grad = -1;
};

constexpr double kSentinelFast = 7777.0, kSentinelRef = -9999.0;

// A second copy of g for another call, its own memory filled with `sentinel`.
Grad copy(const Grad& g, double sentinel) {
  Grad c;
  c.kind = g.kind;
  c.view = g.view;
  c.alias_grad = g.alias_grad;
  if (g.kind == Kind::own) {
    c.buf = fuzz::clone(g.buf);
    fuzz::fill(c.buf, sentinel);
    c.view = c.buf.view;
  }
  return c;
}

// The gradient of an input of `shape` (the caller's: 4-D dense or 3-D packed).
// `must_refuse` says why, when the view is one every call must refuse.
// `targets`: views it may be made to overlap.
Grad make_grad(Ctx& c, const std::vector<std::int64_t>& shape, bool dense,
               const std::vector<Target>& targets, std::string& must_refuse, const char* name) {
  FuzzedDataProvider& fdp = c.fdp;
  Grad g;
  const int k = fdp.ConsumeIntegralInRange<int>(0, 31) < 28 ? 0 : fdp.ConsumeIntegralInRange<int>(22, 31);
  Layout l = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 2));  // contiguous, padded, negative
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) l = Layout::any;
  const bool bshd = dense && fdp.ConsumeBool();
  auto own = [&](DType t, const std::vector<std::int64_t>& s, Layout lay) {
    Buffer b = dense && s.size() == 4 ? c.make4(t, s[0], s[1], s[2], s[3], lay, bshd, false) : c.make(t, s, lay, false);
    return b;
  };
  std::int64_t numel = 1;
  for (std::int64_t x : shape) numel *= x;
  if (k < 22) {
    g.buf = own(DType::f32, shape, l);
  } else if (k < 24) {
    // One axis one longer, or one axis fewer.
    std::vector<std::int64_t> s = shape;
    if (fdp.ConsumeBool() && s.size() > 1)
      s.pop_back();
    else
      s[fdp.ConsumeIntegralInRange<std::size_t>(0, s.size() - 1)] += 1;
    g.buf = c.make(DType::f32, s, l, false);
    must_refuse += std::string(name) + " of the wrong shape; ";
  } else if (k < 25) {
    const DType ts[] = {DType::f64, DType::f16, DType::bf16, DType::i32};
    g.buf = own(ts[fdp.ConsumeIntegralInRange<int>(0, 3)], shape, l);
  } else if (k < 26) {
    g.buf = own(DType::f32, shape, Layout::zero);  // repeated addresses where a stride is 0
  } else if (k < 28) {
    g.buf = own(DType::f32, shape, l);
    g.kind = Kind::null_data;
    if (numel > 0) must_refuse += std::string(name) + " null; ";
  } else if (k < 31 && !targets.empty()) {
    g.buf = own(DType::f32, shape, l);
    const Target& tg = targets[fdp.ConsumeIntegralInRange<std::size_t>(0, targets.size() - 1)];
    const TensorView* t = tg.view;
    g.kind = Kind::alias;
    g.alias_grad = tg.grad;
    if (numel > 0 && t->is_set() && t->numel() > 0) must_refuse += std::string(name) + " overlapping; ";
    g.view = g.buf.view;
    g.view.data = t->data;
    return g;
  } else {
    g.kind = Kind::unset;
    must_refuse += std::string(name) + " unset; ";
    return g;
  }
  g.view = g.buf.view;
  if (g.kind == Kind::null_data) g.view.data = nullptr;
  if (g.kind == Kind::own) fuzz::fill(g.buf, kSentinelFast);
  return g;
}

// dO or lse for the backward: `given` (its own memory) mostly, else a view the
// call must refuse (unset, null, one axis short).
TensorView input_variant(FuzzedDataProvider& fdp, const TensorView& given, std::string& must_refuse, const char* name) {
  TensorView t = given;
  switch (fdp.ConsumeIntegralInRange<int>(0, 47)) {
    case 0:
      must_refuse += std::string(name) + " unset; ";
      return TensorView{};
    case 1:
      if (t.numel() > 0) {
        t.data = nullptr;
        must_refuse += std::string(name) + " null; ";
      }
      return t;
    case 2:
      for (int a = 0; a < t.rank; ++a)
        if (t.shape[a] > 0) {
          --t.shape[a];
          must_refuse += std::string(name) + " one short; ";
          break;
        }
      return t;
    default:
      return t;
  }
}

struct Gradset {
  Grad dq, dk, dv, ds;
  Gradients views() const { return {dq.view, dk.view, dv.view, ds.view}; }
  Gradset copy(double sentinel) const {
    Gradset c{::copy(dq, sentinel), ::copy(dk, sentinel), ::copy(dv, sentinel), ::copy(ds, sentinel)};
    const Grad* own[3] = {&c.dq, &c.dk, &c.dv};
    for (Grad* g : {&c.dq, &c.dk, &c.dv, &c.ds})
      if (g->kind == Kind::alias && g->alias_grad >= 0) g->view.data = own[g->alias_grad]->view.data;
    return c;
  }
  // The bytes of every gradient with memory of its own.
  std::vector<std::vector<std::byte>> bytes() const {
    std::vector<std::vector<std::byte>> r;
    for (const Grad* g : {&dq, &dk, &dv, &ds})
      if (g->kind == Kind::own) r.push_back(g->buf.bytes);
    return r;
  }
};

// With SDPA_FUZZ_STATS set: how many calls ran and were compared, and the
// largest error seen against the oracle (as fuzz::close measures it), printed
// at exit: what kTol is measured against.
struct Stats {
  long calls = 0, fast_ok = 0, compared = 0, elements = 0;
  double worst = 0;
  const char* worst_what = "-";
  static Stats& get() {
    static Stats s;
    static const bool registered = [] {
      std::atexit([] {
        const Stats& t = Stats::get();
        std::fprintf(stderr, "fuzz_backward stats: %ld inputs, %ld ran on the fast path, %ld compared (%ld elements), "
                     "worst error %.3g (%s), tolerance %g\n",
                     t.calls, t.fast_ok, t.compared, t.elements, t.worst, t.worst_what, kTol);
      });
      return true;
    }();
    (void)registered;
    return s;
  }
  static bool on() {
    static const bool enabled = std::getenv("SDPA_FUZZ_STATS") != nullptr;
    return enabled;
  }
  void measure(const char* what, const TensorView& fast, const TensorView& ref) {
    if (!fast.is_set() || !ref.is_set()) return;
    for (std::int64_t i = 0; i < fast.numel(); ++i) {
      const double a = fuzz::load(fast, i), b = fuzz::load(ref, i);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const double e = std::abs(a - b) / (1 + std::abs(b));
      ++elements;
      if (e > worst) {
        worst = e;
        worst_what = what;
      }
    }
  }
};

template <class F>
bool runs(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (std::getenv("SDPA_FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz: sdpa::Error: %s\n", e.what());
    return false;
  }
}

// With SDPA_FUZZ_VERBOSE set: what the call asked for (to read a reproducer).
void describe(int mode, const TensorView& q, const TensorView& k, const TensorView& v, const Options& o,
              const Gradients& g, bool seeded, bool specials, bool forward) {
  if (!std::getenv("SDPA_FUZZ_VERBOSE")) return;
  auto s = [](const TensorView& t) {
    if (!t.is_set()) return std::string("-");
    std::string r = std::string(dtype_name(t.dtype)) + t.shape_string() + " strides";
    for (int a = 0; a < t.rank; ++a) r += " " + std::to_string(t.stride[a]);
    return r + (t.data ? "" : " null");
  };
  std::fprintf(stderr,
               "fuzz: mode %d seeded %d specials %d forward %d\n      q %s\n      k %s\n      v %s\n"
               "      dq %s\n      dk %s\n      dv %s\n      dsinks %s\n"
               "      scale %s causal %d align %d window %lld,%lld softcap %g threads %d isa %s\n"
               "      dropout p %g seed %llu offset %llu\n"
               "      offsets %s key_lengths %s mask %s alibi %s sinks %s\n",
               mode, seeded, specials, forward, s(q).c_str(), s(k).c_str(), s(v).c_str(), s(g.dq).c_str(),
               s(g.dk).c_str(), s(g.dv).c_str(), s(g.dsinks).c_str(),
               o.scale ? std::to_string(*o.scale).c_str() : "-", o.causal, static_cast<int>(o.align),
               static_cast<long long>(o.window_left), static_cast<long long>(o.window_right), o.softcap, o.threads,
               isa_name(o.isa), o.dropout_p, static_cast<unsigned long long>(o.dropout_seed),
               static_cast<unsigned long long>(o.dropout_offset), s(o.position_offsets).c_str(),
               s(o.key_lengths).c_str(), s(o.mask).c_str(), s(o.alibi_slopes).c_str(), s(o.sinks).c_str());
}

// The oracle also takes float64 views, the fast path float32 only.
bool any_f64(const std::vector<const TensorView*>& views) {
  for (const TensorView* t : views)
    if (t->is_set() && t->dtype == DType::f64) return true;
  return false;
}

// Inputs the backward must not write: their bytes now, checked later.
class Snapshot {
 public:
  void add(const Buffer& b) { list_.emplace_back(&b, b.bytes); }
  void check(const char* after) const {
    for (const auto& [b, bytes] : list_)
      if (b->bytes != bytes) {
        std::fprintf(stderr, "fuzz: after %s\n", after);
        fuzz::fail("a backward call wrote one of its inputs (or an Options output it must ignore)");
      }
  }

 private:
  std::vector<std::pair<const Buffer*, std::vector<std::byte>>> list_;
};

// One backward problem, dense or packed, and what is checked of it.
struct Problem {
  bool packed = false;
  TensorView q, k, v, o, lse, d_o, cu_q, cu_k;
  std::int64_t max_q = -1, max_k = -1;
  Options opt;           // the backward's
  std::string must_refuse;  // why the call must be refused (empty: it need not be)
  bool comparable = false;  // the forward wrote o and lse from moderate finite data
  std::vector<const TensorView*> f64_views;

  void call(const Gradients& g, const Options& o, bool reference) const {
    if (packed) {
      attention_varlen_backward(q, k, v, this->o, lse, d_o, g, cu_q, cu_k, o, max_q, max_k, reference);
    } else if (reference) {
      reference_attention_backward(q, k, v, this->o, lse, d_o, g, o);
    } else {
      attention_backward(q, k, v, this->o, lse, d_o, g, o);
    }
  }
};

void check(const Problem& pb, const Gradset& fast0, const Snapshot& inputs) {
  Gradset fast = fast0.copy(kSentinelFast), ref = fast0.copy(kSentinelRef);
  const std::vector<std::vector<std::byte>> fast_init = fast.bytes(), ref_init = ref.bytes();
  const bool fast_ok = runs([&] { pb.call(fast.views(), pb.opt, false); });
  inputs.check("the fast path");
  if (fast_ok && !pb.must_refuse.empty()) {
    std::fprintf(stderr, "fuzz: %s\n", pb.must_refuse.c_str());
    fuzz::fail("the fast path accepted a call it must refuse");
  }
  if (!fast_ok && fast.bytes() != fast_init) fuzz::fail("a refused fast call wrote a gradient");
  const bool ref_ok = runs([&] { pb.call(ref.views(), pb.opt, true); });
  inputs.check("the oracle");
  if (ref_ok && !pb.must_refuse.empty()) {
    std::fprintf(stderr, "fuzz: %s\n", pb.must_refuse.c_str());
    fuzz::fail("the oracle accepted a call it must refuse");
  }
  if (!ref_ok && ref.bytes() != ref_init) fuzz::fail("a refused oracle call wrote a gradient");
  if (fast_ok != ref_ok && !any_f64(pb.f64_views))
    fuzz::fail(fast_ok ? "the oracle refused a call the fast path ran" : "the fast path refused a call the oracle ran");
  if (!fast_ok) return;

  // The same bits for 1 and 3 threads (and the thread count asked for).
  const std::vector<std::vector<std::byte>> first = fast.bytes();
  for (int t : {1, 3}) {
    if (t == pb.opt.threads) continue;
    Options o = pb.opt;
    o.threads = t;
    Gradset again = fast0.copy(kSentinelFast);
    if (!runs([&] { pb.call(again.views(), o, false); })) fuzz::fail("a thread count made the fast path refuse");
    if (again.bytes() != first) {
      std::fprintf(stderr, "fuzz: threads %d vs %d\n", pb.opt.threads, t);
      fuzz::fail("the fast path's gradients depend on the thread count");
    }
  }
  inputs.check("the thread-count runs");

  if (Stats::on()) ++Stats::get().fast_ok;
  if (!ref_ok || !pb.comparable) return;
  if (Stats::on()) {
    Stats& st = Stats::get();
    ++st.compared;
    st.measure("dq", fast.dq.view, ref.dq.view);
    st.measure("dk", fast.dk.view, ref.dk.view);
    st.measure("dv", fast.dv.view, ref.dv.view);
    st.measure("dsinks", fast.ds.view, ref.ds.view);
  }
  fuzz::compare("dq", fast.dq.view, ref.dq.view, kTol);
  fuzz::compare("dk", fast.dk.view, ref.dk.view, kTol);
  fuzz::compare("dv", fast.dv.view, ref.dv.view, kTol);
  fuzz::compare("dsinks", fast.ds.view, ref.ds.view, kTol);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  if (Stats::on()) ++Stats::get().calls;
  Ctx c{fdp};
  const bool packed = fdp.ConsumeBool();
  // Now and then a large problem (several 96-row query blocks, 128-key tiles
  // and dQ slices), its elements drawn from a seed.
  const bool big = fdp.ConsumeIntegralInRange<int>(0, 15) == 0;
  c.seeded = big || fdp.ConsumeIntegralInRange<int>(0, 5) == 0;
  c.rng.state = fdp.ConsumeIntegral<std::uint64_t>();
  const std::int64_t B = big ? 1 : fdp.ConsumeIntegralInRange<int>(0, 2);
  const std::int64_t Hkv = big ? 1 : fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? 0 : fdp.ConsumeIntegralInRange<int>(1, 3);
  const std::int64_t H = Hkv == 0 ? 0
                         : fdp.ConsumeBool() ? Hkv * fdp.ConsumeIntegralInRange<int>(1, 3)
                                             : fdp.ConsumeIntegralInRange<int>(1, 4);
  const std::int64_t Nq = fdp.ConsumeIntegralInRange<int>(0, big ? 110 : 6);
  const std::int64_t Nkv = fdp.ConsumeIntegralInRange<int>(0, big ? 300 : 40);
  const std::int64_t d = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeIntegralInRange<int>(1, 20)
                                                                     : fdp.ConsumeIntegralInRange<int>(1, 9);
  const std::int64_t dv = fdp.ConsumeBool() ? d : fdp.ConsumeIntegralInRange<int>(1, 9);
  const Layout layout = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 4));
  const bool bshd = !packed && fdp.ConsumeBool();
  c.specials = fdp.ConsumeIntegralInRange<int>(0, 7) == 0;
  const bool spec_in = c.specials;
  // 1 in 12: o and lse are not the forward's (random, maybe NaN): checked for
  // crashes only.
  const bool hostile = fdp.ConsumeIntegralInRange<int>(0, 11) == 0;

  std::vector<Buffer> keep;
  keep.reserve(16);
  Problem pb;
  pb.packed = packed;
  Buffer q, k, v, o, lse, d_o, cuq, cuk;
  std::vector<std::int64_t> q_shape, k_shape, v_shape, o_shape;  // the caller's
  Options opt;
  Options fwd;

  if (!packed) {
    const DType in_t = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? DType::f64 : DType::f32;
    q = c.make4(in_t, maybe_off(fdp, B), maybe_off(fdp, H), maybe_off(fdp, Nq), maybe_off(fdp, d), layout, bshd, spec_in);
    k = c.make4(in_t, maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, Nkv), maybe_off(fdp, d), layout, bshd, spec_in);
    v = c.make4(in_t, maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, Nkv), maybe_off(fdp, dv), layout, bshd, spec_in);
    opt = fuzz_options(c, keep, B, H, Nq, Nkv, true);
    const Layout ol = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? Layout::any
                                                                 : static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 2));
    o = c.make4(DType::f32, B, H, Nq, dv, ol, fdp.ConsumeBool(), hostile);
    lse = c.make(DType::f32, {B, H, Nq}, ol, hostile);
    for (const Buffer* b : {&q, &k, &v}) pb.f64_views.push_back(&b->view);
    fwd = opt;
    fwd.lse = lse.view;
  } else {
    // Packed sequences: lengths from the input, cu_seqlens sometimes corrupted.
    const int n = big ? fdp.ConsumeIntegralInRange<int>(1, 3) : fdp.ConsumeIntegralInRange<int>(0, 3);
    std::vector<std::int64_t> cq{0}, ck{0};
    for (int s = 0; s < n; ++s) {
      cq.push_back(cq.back() + fdp.ConsumeIntegralInRange<int>(0, big ? 60 : 4));
      ck.push_back(ck.back() + fdp.ConsumeIntegralInRange<int>(0, big ? 200 : 12));
    }
    const std::int64_t total_q = cq.back(), total_k = ck.back();
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0)
      cq[fdp.ConsumeIntegralInRange<std::size_t>(0, cq.size() - 1)] += fdp.ConsumeIntegralInRange<int>(-3, 3);
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0)
      ck[fdp.ConsumeIntegralInRange<std::size_t>(0, ck.size() - 1)] += fdp.ConsumeIntegralInRange<int>(-3, 3);
    const DType it = index_type(fdp);
    cuq = fuzz::make_buffer(fdp, it, {static_cast<std::int64_t>(cq.size())}, Layout::contiguous);
    cuk = fuzz::make_buffer(fdp, it, {static_cast<std::int64_t>(ck.size())}, Layout::contiguous);
    for (std::size_t i = 0; i < cq.size(); ++i) fuzz::store(cuq.bytes.data() + i * dtype_size(it), it, cq[i]);
    for (std::size_t i = 0; i < ck.size(); ++i) fuzz::store(cuk.bytes.data() + i * dtype_size(it), it, ck[i]);
    if (fdp.ConsumeBool()) {
      pb.max_q = fdp.ConsumeIntegralInRange<int>(-1, big ? 60 : 5);
      pb.max_k = fdp.ConsumeIntegralInRange<int>(-1, big ? 200 : 12);
    }
    const DType in_t = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? DType::f64 : DType::f32;
    q = c.make(in_t, {maybe_off(fdp, total_q), maybe_off(fdp, H), maybe_off(fdp, d)}, layout, spec_in);
    k = c.make(in_t, {maybe_off(fdp, total_k), maybe_off(fdp, Hkv), maybe_off(fdp, d)}, layout, spec_in);
    v = c.make(in_t, {maybe_off(fdp, total_k), maybe_off(fdp, Hkv), maybe_off(fdp, dv)}, layout, spec_in);
    opt = fuzz_options(c, keep, n, H, Nq, Nkv, fdp.ConsumeIntegralInRange<int>(0, 7) == 0);
    const Layout ol = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? Layout::any
                                                                 : static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 2));
    o = c.make(DType::f32, {total_q, H, dv}, ol, hostile);
    lse = c.make(DType::f32, {H, total_q}, ol, hostile);
    for (const Buffer* b : {&q, &k, &v}) pb.f64_views.push_back(&b->view);
    fwd = opt;
    fwd.lse = lse.view;
    pb.cu_q = cuq.view;
    pb.cu_k = cuk.view;
  }
  if (opt.sinks.is_set()) pb.f64_views.push_back(&opt.sinks);
  if (opt.mask.is_set()) pb.f64_views.push_back(&opt.mask);
  pb.q = q.view;
  pb.k = k.view;
  pb.v = v.view;
  pb.o = o.view;

  // The forward writes o and lse (unless they are to stay hostile).
  bool forward_ok = false;
  if (!hostile) {
    forward_ok = runs([&] {
      if (packed)
        attention_varlen(q.view, k.view, v.view, o.view, cuq.view, cuk.view, fwd, pb.max_q, pb.max_k, false);
      else
        attention(q.view, k.view, v.view, o.view, fwd);
    });
  }

  // dO: its own memory, o itself, or a view to refuse.
  const std::vector<std::int64_t> do_shape(o.view.shape.begin(), o.view.shape.begin() + o.view.rank);
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    pb.d_o = o.view;
  } else {
    const Layout dl = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 4));
    d_o = packed ? c.make(DType::f32, do_shape, dl, spec_in)
                 : c.make4(DType::f32, B, H, Nq, dv, dl, fdp.ConsumeBool(), spec_in);
    pb.d_o = d_o.view;
  }
  pb.d_o = input_variant(fdp, pb.d_o, pb.must_refuse, "d_o");
  pb.lse = input_variant(fdp, lse.view, pb.must_refuse, "lse");

  // The backward's Options: the forward's, and now and then its optional
  // outputs set to memory the backward must leave alone.
  pb.opt = opt;
  Buffer ignored;
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    ignored = c.make(DType::f32, {B, H, Nq, Nkv}, Layout::contiguous, false);
    pb.opt.lse = ignored.view;
    pb.opt.probs = ignored.view;
    pb.opt.scores = ignored.view;
    pb.opt.scores_stage = static_cast<ScoresStage>(fdp.ConsumeIntegralInRange<int>(0, 7));
    TensorView m = ignored.view;
    m.dtype = DType::boolean;  // a quarter of the bytes: inside the buffer
    pb.opt.dropout_mask = m;
  }

  // The gradients, in the caller's shapes of q, k, v; dsinks [H] when there are sinks.
  auto shape_of = [](const TensorView& t) { return std::vector<std::int64_t>(t.shape.begin(), t.shape.begin() + t.rank); };
  std::vector<Target> targets = {{&pb.q}, {&pb.k}, {&pb.v}, {&pb.o}, {&pb.lse}, {&pb.d_o}};
  for (const TensorView* t : {&opt.mask, &opt.sinks, &opt.alibi_slopes, &opt.position_offsets, &opt.key_lengths,
                              &pb.cu_q, &pb.cu_k})
    if (t->is_set()) targets.push_back({t});
  Gradset g;
  g.dq = make_grad(c, shape_of(q.view), !packed, targets, pb.must_refuse, "dq");
  if (g.dq.kind == Kind::own) targets.push_back({&g.dq.view, 0});
  g.dk = make_grad(c, shape_of(k.view), !packed, targets, pb.must_refuse, "dk");
  if (g.dk.kind == Kind::own) targets.push_back({&g.dk.view, 1});
  g.dv = make_grad(c, shape_of(v.view), !packed, targets, pb.must_refuse, "dv");
  if (fdp.ConsumeIntegralInRange<int>(0, opt.sinks.is_set() ? 1 : 15) == 0) {
    // dsinks: its own [H] (strided, maybe wrongly sized), or null.
    const bool sized = fdp.ConsumeIntegralInRange<int>(0, 7) != 0;
    g.ds.buf = c.make(fdp.ConsumeIntegralInRange<int>(0, 7) ? DType::f32 : DType::f64, {sized ? H : H + 1},
                      Layout::any, false, fdp.ConsumeBool());
    fuzz::fill(g.ds.buf, kSentinelFast);
    g.ds.view = g.ds.buf.view;
    if (!sized) pb.must_refuse += "dsinks of the wrong shape; ";
    if (!opt.sinks.is_set()) pb.must_refuse += "dsinks without sinks; ";
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0 && H > 0) {
      g.ds.kind = Kind::null_data;
      g.ds.view.data = nullptr;
      pb.must_refuse += "dsinks null; ";
    } else if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0 && H > 0) {
      // Inside dq or dk (when they have elements): an overlap.
      const int which = fdp.ConsumeBool() ? 0 : 1;
      const Grad& in = which == 0 ? g.dq : g.dk;
      if (in.kind == Kind::own && in.view.numel() > 0) {
        g.ds.kind = Kind::alias;
        g.ds.alias_grad = which;
        g.ds.view.data = in.view.data;
        pb.must_refuse += "dsinks overlapping; ";
      }
    }
    pb.f64_views.push_back(&g.ds.view);
  }
  for (const Grad* x : {&g.dq, &g.dk, &g.dv})
    if (x->kind == Kind::own) pb.f64_views.push_back(&x->view);

  pb.comparable = forward_ok && !c.specials && !hostile;
  describe(packed, q.view, k.view, v.view, pb.opt, g.views(), c.seeded, c.specials, forward_ok);

  Snapshot inputs;
  for (const Buffer* b : {&q, &k, &v, &o, &lse, &d_o, &cuq, &cuk, &ignored}) inputs.add(*b);
  for (const Buffer& b : keep) inputs.add(b);
  check(pb, g, inputs);
  return 0;
}
