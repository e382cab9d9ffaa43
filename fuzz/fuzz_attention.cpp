// The library entry: sdpa::attention / reference_attention through every
// Options member (scale, causal, align, offsets, key lengths, windows, masks,
// ALiBi, softcap, sinks, threads, lse/probs/scores), with strides that are
// padded, negative or zero, and GQA; and the serving calls (varlen, kvcache,
// paged). Every call either succeeds or throws sdpa::Error; where the fast
// path and the float64 oracle both run, their outputs agree.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "sdpa/attention.h"
#include "sdpa/serving.h"

namespace {

using namespace sdpa;
using fuzz::Buffer;
using fuzz::Layout;

constexpr double kTol = 2e-3;

std::int64_t maybe_off(FuzzedDataProvider& fdp, std::int64_t v) {
  return fdp.ConsumeIntegralInRange<int>(0, 23) == 0 ? fdp.ConsumeIntegralInRange<std::int64_t>(0, 5) : v;
}

DType index_type(FuzzedDataProvider& fdp) {
  const int c = fdp.ConsumeIntegralInRange<int>(0, 15);
  return c == 0 ? DType::f32 : c < 8 ? DType::i32 : DType::i64;
}

// Outputs of one call, allocated alike for the fast path and the oracle.
struct Outputs {
  Buffer o, lse, probs, scores;
  Options opt;
};

// The modifiers every call takes; B, H, Nq, Nkv as the call sees them.
// `dense`: also the members only sdpa::attention (and kvcache) take.
Options fuzz_options(FuzzedDataProvider& fdp, std::vector<Buffer>& keep, std::int64_t B, std::int64_t H,
                     std::int64_t Nq, std::int64_t Nkv, bool dense, bool& specials) {
  Options opt;
  if (fdp.ConsumeBool()) {
    const double sc[] = {0.5, 1.0, 0.125, 0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity(), 1e-300, 1e30, 4.0};
    opt.scale = sc[fdp.ConsumeIntegralInRange<int>(0, 9)];
    if (!(*opt.scale > 0 && *opt.scale < 10)) specials = true;
  }
  opt.causal = fdp.ConsumeBool();
  opt.align = fdp.ConsumeBool() ? Align::bottom_right : Align::top_left;
  if (fdp.ConsumeIntegralInRange<int>(0, 4) == 0) {
    opt.window_left = fdp.ConsumeIntegralInRange<int>(-3, 6);
    opt.window_right = fdp.ConsumeIntegralInRange<int>(-3, 6);
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const double cap[] = {1.0, 5.0, 0.01, -1.0, std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::infinity(), 50.0};
    opt.softcap = cap[fdp.ConsumeIntegralInRange<int>(0, 6)];
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const bool per_batch = fdp.ConsumeBool();
    keep.push_back(fuzz::make_buffer(fdp, fdp.ConsumeIntegralInRange<int>(0, 7) ? DType::f32 : DType::f16,
                                     per_batch ? std::vector<std::int64_t>{maybe_off(fdp, B), maybe_off(fdp, H)}
                                               : std::vector<std::int64_t>{maybe_off(fdp, H)},
                                     Layout::any));
    opt.alibi_slopes = keep.back().view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    keep.push_back(fuzz::make_buffer(fdp, fdp.ConsumeIntegralInRange<int>(0, 7) ? DType::f32 : DType::f64,
                                     {maybe_off(fdp, H)}, Layout::any, specials));
    opt.sinks = keep.back().view;
  }
  const int threads[] = {1, 2, 0, 3, -1};
  opt.threads = threads[fdp.ConsumeIntegralInRange<int>(0, 4)];
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
      const int c = fdp.ConsumeIntegralInRange<int>(0, 7);
      ms.push_back(c <= 4 ? full[a] : c == 5 ? 1 : fdp.ConsumeIntegralInRange<std::int64_t>(0, 5));
    }
    Buffer m = fuzz::make_buffer(fdp, mdt, ms, Layout::any, false);
    if (mdt != DType::boolean) {
      const std::size_t es = dtype_size(mdt);
      for (std::size_t e = 0; e * es < m.bytes.size(); ++e) {
        const int c = fdp.ConsumeIntegralInRange<int>(0, 3);
        fuzz::store(m.bytes.data() + e * es, mdt,
                    c == 0 ? -std::numeric_limits<double>::infinity() : c == 1 ? 0.0 : fuzz::fuzz_value(fdp, false));
      }
    }
    keep.push_back(std::move(m));
    opt.mask = keep.back().view;
  }
  return opt;
}

// lse/probs/scores requests, for the fast path and the oracle alike.
struct Extras {
  bool lse = false, probs = false, scores = false;
  int stage = 0;
  Layout layout = Layout::contiguous;
};

Extras fuzz_extras(FuzzedDataProvider& fdp, bool dense) {
  Extras e;
  e.lse = fdp.ConsumeIntegralInRange<int>(0, 2) == 0;
  if (dense) {
    e.probs = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
    e.scores = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  }
  e.stage = fdp.ConsumeIntegralInRange<int>(0, 3);
  e.layout = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? Layout::any : Layout::contiguous;
  return e;
}

void attach(FuzzedDataProvider& fdp, Outputs& out, const Extras& e, const std::vector<std::int64_t>& o_shape,
            const std::vector<std::int64_t>& lse_shape, const std::vector<std::int64_t>& p_shape, DType odt) {
  out.o = fuzz::make_buffer(fdp, odt, o_shape, e.layout);
  if (e.lse) {
    out.lse = fuzz::make_buffer(fdp, odt, lse_shape, e.layout);
    out.opt.lse = out.lse.view;
  }
  if (e.probs) {
    out.probs = fuzz::make_buffer(fdp, odt, p_shape, e.layout);
    out.opt.probs = out.probs.view;
  }
  if (e.scores) {
    out.scores = fuzz::make_buffer(fdp, odt, p_shape, e.layout);
    out.opt.scores = out.scores.view;
    out.opt.scores_stage = static_cast<ScoresStage>(e.stage);
  }
}

// The oracle's outputs: the fast path's layout, in memory of their own.
void attach_like(Outputs& ref, const Outputs& fast) {
  ref.o = fuzz::clone(fast.o);
  if (fast.opt.lse.is_set()) {
    ref.lse = fuzz::clone(fast.lse);
    ref.opt.lse = ref.lse.view;
  }
  if (fast.opt.probs.is_set()) {
    ref.probs = fuzz::clone(fast.probs);
    ref.opt.probs = ref.probs.view;
  }
  if (fast.opt.scores.is_set()) {
    ref.scores = fuzz::clone(fast.scores);
    ref.opt.scores = ref.scores.view;
    ref.opt.scores_stage = fast.opt.scores_stage;
  }
}

// With SDPA_FUZZ_VERBOSE set: what the call asked for (to read a reproducer).
void describe(int mode, const Options& o) {
  if (!std::getenv("SDPA_FUZZ_VERBOSE")) return;
  auto v = [](const TensorView& t) { return t.is_set() ? std::string(dtype_name(t.dtype)) + t.shape_string() : std::string("-"); };
  std::fprintf(stderr,
               "fuzz: mode %d scale %s causal %d align %d window %lld,%lld softcap %g threads %d isa %s\n"
               "      offsets %s key_lengths %s mask %s alibi %s sinks %s lse %s probs %s scores %s stage %d\n",
               mode, o.scale ? std::to_string(*o.scale).c_str() : "-", o.causal, static_cast<int>(o.align),
               static_cast<long long>(o.window_left), static_cast<long long>(o.window_right), o.softcap, o.threads,
               isa_name(o.isa), v(o.position_offsets).c_str(), v(o.key_lengths).c_str(), v(o.mask).c_str(),
               v(o.alibi_slopes).c_str(), v(o.sinks).c_str(), v(o.lse).c_str(), v(o.probs).c_str(), v(o.scores).c_str(),
               static_cast<int>(o.scores_stage));
}

void compare_outputs(const Outputs& fast, const Outputs& ref) {
  fuzz::compare("o", fast.o.view, ref.o.view, kTol);
  fuzz::compare("lse", fast.opt.lse, ref.opt.lse, kTol);
  fuzz::compare("probs", fast.opt.probs, ref.opt.probs, kTol);
  fuzz::compare("scores", fast.opt.scores, ref.opt.scores, kTol);
}

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

// The oracle also takes float64 views (its inputs), the fast path float32 only.
bool any_f64(const Options& o) {
  for (const TensorView* t : {&o.mask, &o.alibi_slopes, &o.sinks})
    if (t->is_set() && t->dtype == DType::f64) return true;
  return false;
}

void check_agreement(bool fast_ok, bool ref_ok, const Options& opt) {
  if (fast_ok != ref_ok && !any_f64(opt))
    fuzz::fail(fast_ok ? "the oracle refused a call the fast path ran" : "the fast path refused a call the oracle ran");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 3);  // 0 dense, 1 varlen, 2 kvcache, 3 paged
  const std::int64_t B = fdp.ConsumeIntegralInRange<int>(0, 2);
  const std::int64_t Hkv = fdp.ConsumeIntegralInRange<int>(1, 3);
  const std::int64_t H = fdp.ConsumeBool() ? Hkv * fdp.ConsumeIntegralInRange<int>(1, 3)
                                           : fdp.ConsumeIntegralInRange<int>(1, 4);
  const std::int64_t Nq = fdp.ConsumeIntegralInRange<int>(0, 5);
  const std::int64_t Nkv = fdp.ConsumeIntegralInRange<int>(0, 40);  // > 32 reaches split-KV decode tiles
  const std::int64_t d = fdp.ConsumeIntegralInRange<int>(1, 9);
  const std::int64_t dv = fdp.ConsumeBool() ? d : fdp.ConsumeIntegralInRange<int>(1, 9);
  const Layout layout = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 4));
  bool specials = fdp.ConsumeIntegralInRange<int>(0, 7) == 0;
  const bool spec_in = specials;
  std::vector<Buffer> keep;
  keep.reserve(16);
  Outputs fast, ref;

  if (mode == 0) {
    const DType in_t = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? DType::f64 : DType::f32;
    // Storage per operand: mostly in_t, sometimes float16 or bfloat16 (both
    // paths read those, so they must agree on them too).
    auto storage = [&] {
      if (in_t == DType::f64) return in_t;
      const int c = fdp.ConsumeIntegralInRange<int>(0, 5);
      return c == 4 ? DType::f16 : c == 5 ? DType::bf16 : in_t;
    };
    Buffer q = fuzz::make_buffer(fdp, storage(), {maybe_off(fdp, B), maybe_off(fdp, H), maybe_off(fdp, Nq), maybe_off(fdp, d)},
                                 layout, spec_in);
    Buffer k = fuzz::make_buffer(fdp, storage(), {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, Nkv), maybe_off(fdp, d)},
                                 layout, spec_in);
    Buffer v = fuzz::make_buffer(fdp, storage(), {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, Nkv), maybe_off(fdp, dv)},
                                 layout, spec_in);
    const Options opt = fuzz_options(fdp, keep, B, H, Nq, Nkv, true, specials);
    const Extras e = fuzz_extras(fdp, true);
    fast.opt = ref.opt = opt;
    attach(fdp, fast, e, {B, H, Nq, dv}, {B, H, Nq}, {B, H, Nq, Nkv}, DType::f32);
    attach_like(ref, fast);
    describe(mode, fast.opt);
    const bool fast_ok = runs([&] { attention(q.view, k.view, v.view, fast.o.view, fast.opt); });
    const bool ref_ok = runs([&] { reference_attention(q.view, k.view, v.view, ref.o.view, ref.opt); });
    if (in_t == DType::f32) check_agreement(fast_ok, ref_ok, opt);
    if (fast_ok && ref_ok && !specials) compare_outputs(fast, ref);
    return 0;
  }

  if (mode == 1) {
    // Packed sequences: lengths from the input, cu_seqlens sometimes corrupted.
    const int n = fdp.ConsumeIntegralInRange<int>(0, 3);
    std::vector<std::int64_t> cq{0}, ck{0};
    for (int s = 0; s < n; ++s) {
      cq.push_back(cq.back() + fdp.ConsumeIntegralInRange<int>(0, 4));
      ck.push_back(ck.back() + fdp.ConsumeIntegralInRange<int>(0, 12));
    }
    const std::int64_t total_q = cq.back(), total_k = ck.back();
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) cq[fdp.ConsumeIntegralInRange<std::size_t>(0, cq.size() - 1)] += fdp.ConsumeIntegralInRange<int>(-3, 3);
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) ck[fdp.ConsumeIntegralInRange<std::size_t>(0, ck.size() - 1)] += fdp.ConsumeIntegralInRange<int>(-3, 3);
    const DType it = index_type(fdp);
    Buffer cuq = fuzz::make_buffer(fdp, it, {static_cast<std::int64_t>(cq.size())}, Layout::contiguous);
    Buffer cuk = fuzz::make_buffer(fdp, it, {static_cast<std::int64_t>(ck.size())}, Layout::contiguous);
    for (std::size_t i = 0; i < cq.size(); ++i) fuzz::store(cuq.bytes.data() + i * dtype_size(it), it, cq[i]);
    for (std::size_t i = 0; i < ck.size(); ++i) fuzz::store(cuk.bytes.data() + i * dtype_size(it), it, ck[i]);
    std::int64_t maxq = -1, maxk = -1;
    if (fdp.ConsumeBool()) {
      maxq = fdp.ConsumeIntegralInRange<int>(-1, 5);
      maxk = fdp.ConsumeIntegralInRange<int>(-1, 12);
    }
    Buffer q = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, total_q), maybe_off(fdp, H), maybe_off(fdp, d)}, layout, spec_in);
    Buffer k = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, total_k), maybe_off(fdp, Hkv), maybe_off(fdp, d)}, layout, spec_in);
    Buffer v = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, total_k), maybe_off(fdp, Hkv), maybe_off(fdp, dv)}, layout, spec_in);
    const Options opt = fuzz_options(fdp, keep, n, H, Nq, Nkv, fdp.ConsumeIntegralInRange<int>(0, 7) == 0, specials);
    const Extras e = fuzz_extras(fdp, false);
    fast.opt = ref.opt = opt;
    attach(fdp, fast, e, {total_q, H, dv}, {H, total_q}, {}, DType::f32);
    attach_like(ref, fast);
    describe(mode, fast.opt);
    const bool fast_ok = runs([&] {
      attention_varlen(q.view, k.view, v.view, fast.o.view, cuq.view, cuk.view, fast.opt, maxq, maxk, false);
    });
    const bool ref_ok = runs([&] {
      attention_varlen(q.view, k.view, v.view, ref.o.view, cuq.view, cuk.view, ref.opt, maxq, maxk, true);
    });
    check_agreement(fast_ok, ref_ok, opt);
    if (fast_ok && ref_ok && !specials) compare_outputs(fast, ref);
    return 0;
  }

  // KV caches, contiguous (mode 2) or paged (mode 3).
  const bool paged = mode == 3;
  const std::int64_t n_new = fdp.ConsumeIntegralInRange<int>(0, 3);
  const bool with_new = fdp.ConsumeBool();
  const std::int64_t page_size = fdp.ConsumeIntegralInRange<int>(1, 5);
  const std::int64_t max_pages = fdp.ConsumeIntegralInRange<int>(0, 4);
  const std::int64_t num_pages = fdp.ConsumeIntegralInRange<int>(0, 6);
  const std::int64_t capacity = paged ? max_pages * page_size : fdp.ConsumeIntegralInRange<int>(0, 40);
  const DType it = index_type(fdp);
  Buffer seqlens = fuzz::make_int_buffer(fdp, it, {maybe_off(fdp, B)}, -1, capacity + 1);
  Buffer table;
  if (paged) table = fuzz::make_int_buffer(fdp, index_type(fdp), {maybe_off(fdp, B), maybe_off(fdp, max_pages)}, -1, num_pages);
  Buffer q = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, B), maybe_off(fdp, H), maybe_off(fdp, Nq), maybe_off(fdp, d)}, layout, spec_in);
  Buffer kc, vc;
  if (paged) {
    kc = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, num_pages), maybe_off(fdp, page_size), maybe_off(fdp, Hkv), maybe_off(fdp, d)}, layout, spec_in);
    vc = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, num_pages), maybe_off(fdp, page_size), maybe_off(fdp, Hkv), maybe_off(fdp, dv)}, layout, spec_in);
  } else {
    kc = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, capacity), maybe_off(fdp, d)}, layout, spec_in);
    vc = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, capacity), maybe_off(fdp, dv)}, layout, spec_in);
  }
  Buffer kn, vn;
  if (with_new) {
    kn = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, n_new), maybe_off(fdp, d)}, layout, spec_in);
    vn = fuzz::make_buffer(fdp, DType::f32, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, n_new), maybe_off(fdp, dv)}, layout, spec_in);
  }
  const Options opt = fuzz_options(fdp, keep, B, H, Nq, capacity, !paged || fdp.ConsumeIntegralInRange<int>(0, 7) == 0, specials);
  const Extras e = fuzz_extras(fdp, !paged);
  fast.opt = ref.opt = opt;
  attach(fdp, fast, e, {B, H, Nq, dv}, {B, H, Nq}, {B, H, Nq, capacity}, DType::f32);
  attach_like(ref, fast);
  const std::vector<std::byte> k0 = kc.bytes, v0 = vc.bytes;
  auto call = [&](Outputs& out, bool reference) {
    if (paged)
      attention_paged(q.view, kc.view, vc.view, table.view, seqlens.view, kn.view, vn.view, out.o.view, out.opt, reference);
    else
      attention_kvcache(q.view, kc.view, vc.view, seqlens.view, kn.view, vn.view, out.o.view, out.opt, reference);
  };
  describe(mode, fast.opt);
  const bool fast_ok = runs([&] { call(fast, false); });
  if (!fast_ok && (kc.bytes != k0 || vc.bytes != v0)) fuzz::fail("a refused cache call wrote the cache");
  const std::vector<std::byte> k1 = kc.bytes, v1 = vc.bytes;
  std::copy(k0.begin(), k0.end(), kc.bytes.begin());  // in place: the views stay valid
  std::copy(v0.begin(), v0.end(), vc.bytes.begin());
  const bool ref_ok = runs([&] { call(ref, true); });
  check_agreement(fast_ok, ref_ok, opt);
  if (fast_ok && ref_ok) {
    if (kc.bytes != k1 || vc.bytes != v1) fuzz::fail("the fast path and the oracle appended different keys");
    if (!specials) compare_outputs(fast, ref);
  }
  return 0;
}
