// `sdpa decode`: simulated token generation against a KV cache.
//
// Prefills a cache with --prompt random tokens (one causal call that appends
// them), then decodes --tokens steps one query at a time, each appending its
// own key and value, through the contiguous or the paged cache. The last step
// is checked against the float64 oracle. Decode is memory-bound: every step
// reads the whole cache once (each K/V head once for all the query heads that
// share it), so the figure of merit is KV bytes read per second against the
// DRAM read bandwidth measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "sdpa/attention.h"
#include "sdpa/serving.h"
#include "support/machine.h"

namespace sdpa::cli {
namespace {

struct DecodeArgs {
  std::string prompt = "4096", tokens = "32", batch = "1", heads = "32", kv_heads = "8", d = "128";
  std::string page_size = "16", threads = "0", isa = "auto";
  bool paged = false;
};

struct Cache {
  std::int64_t b, h_kv, cap, d, page_size, max_pages;
  bool paged;
  std::vector<float> k, v;        // contiguous [B, Hkv, cap, d] or pages [num_pages, page_size, Hkv, d]
  std::vector<std::int32_t> table;  // [B, max_pages], pages handed out in a shuffled order
  std::vector<std::int64_t> lens;

  Cache(std::int64_t b_, std::int64_t h_kv_, std::int64_t cap_, std::int64_t d_, bool paged_, std::int64_t ps)
      : b(b_), h_kv(h_kv_), cap(cap_), d(d_), page_size(ps), max_pages((cap_ + ps - 1) / ps), paged(paged_),
        k(static_cast<std::size_t>(b_ * h_kv_ * (paged_ ? max_pages * ps : cap_) * d_)), v(k.size()),
        lens(static_cast<std::size_t>(b_), 0) {
    if (paged) {
      table.resize(static_cast<std::size_t>(b * max_pages));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(7));
    }
  }

  // One call: append k_new/v_new (n_new tokens) and attend with q.
  void attend(const std::vector<float>& q, std::int64_t h, std::int64_t n_new, const float* k_new, const float* v_new,
              float* o, const Options& opt, bool reference) {
    const TensorView qv = TensorView::contiguous(q.data(), {b, h, n_new, d});
    const TensorView kn = k_new ? TensorView::contiguous(k_new, {b, h_kv, n_new, d}) : TensorView();
    const TensorView vn = v_new ? TensorView::contiguous(v_new, {b, h_kv, n_new, d}) : TensorView();
    const TensorView ov = TensorView::contiguous(o, {b, h, n_new, d});
    const TensorView lv = TensorView::contiguous(lens.data(), DType::i64, {b});
    if (paged) {
      const std::int64_t num_pages = b * max_pages;
      attention_paged(qv, TensorView::contiguous(k.data(), {num_pages, page_size, h_kv, d}),
                      TensorView::contiguous(v.data(), {num_pages, page_size, h_kv, d}),
                      TensorView::contiguous(table.data(), DType::i32, {b, max_pages}), lv, kn, vn, ov, opt, reference);
    } else {
      attention_kvcache(qv, TensorView::contiguous(k.data(), {b, h_kv, cap, d}),
                        TensorView::contiguous(v.data(), {b, h_kv, cap, d}), lv, kn, vn, ov, opt, reference);
    }
    if (k_new)
      for (auto& l : lens) l += n_new;
  }
};

std::vector<float> randn(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& e : x) e = normal(rng);
  return x;
}

// The flags that size the arrays, in the order check_sizes takes their values.
struct SizeFlag {
  const char* flag;
  std::int64_t fallback;  // the default, against which the culprit is found
  const std::string DecodeArgs::*text;
};
constexpr SizeFlag kSizeFlags[] = {{"--batch", 1, &DecodeArgs::batch},     {"--heads", 32, &DecodeArgs::heads},
                                   {"--kv-heads", 8, &DecodeArgs::kv_heads}, {"--prompt", 4096, &DecodeArgs::prompt},
                                   {"--tokens", 32, &DecodeArgs::tokens},    {"--d", 128, &DecodeArgs::d},
                                   {"--page-size", 16, &DecodeArgs::page_size}};

// Bytes the run holds at once (saturating): the K and V caches, and the
// prefill's Q, O, new keys and values; and the pages the int32 block table
// must be able to number.
struct Footprint {
  std::uint64_t bytes, pages;
};
Footprint footprint(const std::array<std::int64_t, 7>& x, bool paged) {
  const auto [b, h, h_kv, prompt, tokens, d, ps] = x;
  const std::uint64_t cap = add_sat(prompt, tokens);
  const std::uint64_t pages_per_seq = paged ? cap / ps + (cap % ps != 0) : 0;
  const std::uint64_t rows = paged ? mul_sat(pages_per_seq, ps) : cap;
  const std::uint64_t cache = mul_sat(mul_sat(mul_sat(b, h_kv), rows), d);
  const std::uint64_t q = mul_sat(mul_sat(mul_sat(b, h), prompt), d), kv_new = mul_sat(mul_sat(mul_sat(b, h_kv), prompt), d);
  const std::uint64_t floats = add_sat(add_sat(mul_sat(2, cache), mul_sat(2, q)), mul_sat(2, kv_new));
  return {mul_sat(floats, sizeof(float)), mul_sat(b, pages_per_seq)};
}

// Checked before any work: the sizes the flags imply must fit in memory (and
// the page count in the int32 block table). The flag named is the one whose
// default would shrink the run the most.
void check_sizes(const DecodeArgs& a, const std::array<std::int64_t, 7>& x) {
  const Footprint f = footprint(x, a.paged);
  const bool too_many_pages = f.pages > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  const std::uint64_t have = physical_memory_bytes();
  if (f.bytes <= have && !too_many_pages) return;
  std::size_t culprit = 0;
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] <= kSizeFlags[i].fallback) continue;
    std::array<std::int64_t, 7> y = x;
    y[i] = kSizeFlags[i].fallback;
    const Footprint g = footprint(y, a.paged);
    const std::uint64_t score = too_many_pages && f.bytes <= have ? g.pages : g.bytes;
    if (score < best) {
      best = score;
      culprit = i;
    }
  }
  const SizeFlag& sf = kSizeFlags[culprit];
  if (f.bytes > have)
    check_fits_memory(sf.flag, a.*sf.text, f.bytes, "K/V cache, queries and outputs");
  throw UsageError(fmt::format("{}: expected sizes whose pages an int32 block table can number (at most {}), got {} "
                               "({} pages)",
                               sf.flag, std::numeric_limits<std::int32_t>::max(), a.*sf.text, f.pages));
}

int run_decode(const DecodeArgs& a) {
  const std::int64_t prompt = parse_integer("--prompt", a.prompt, 1), tokens = parse_integer("--tokens", a.tokens, 1),
                     b = parse_integer("--batch", a.batch, 1), h = parse_integer("--heads", a.heads, 1),
                     h_kv = parse_integer("--kv-heads", a.kv_heads, 1), d = parse_integer("--d", a.d, 1),
                     page_size = parse_integer("--page-size", a.page_size, 1),
                     threads = parse_integer("--threads", a.threads, 0);
  // The arrays are made from these flags, so a library error would name arrays
  // the user never gave: the one rule that ties two flags together is said in flag terms.
  if (h % h_kv != 0) throw UsageError(fmt::format("--kv-heads: expected a divisor of --heads={}, got {}", h, h_kv));
  check_sizes(a, {b, h, h_kv, prompt, tokens, d, page_size});
  const Isa isa = parse_isa(a.isa);
  const int t = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Options opt;
  opt.isa = isa;
  opt.threads = t;
  opt.causal = true;

  fmt::print("sdpa decode: B={} H={} Hkv={} d={}, prompt {} tokens, {} decode steps, {} cache{}, {} threads, isa {}\n",
             b, h, h_kv, d, prompt, tokens, a.paged ? "paged" : "contiguous",
             a.paged ? fmt::format(" (page size {})", page_size) : "", t, isa_name(resolve_isa(isa)));
  const double bw = sdpa::bench::measure_read_bandwidth_gbs(t);
  fmt::print("DRAM read bandwidth ({} threads): {:.1f} GB/s\n", t, bw);

  std::mt19937_64 rng(2026);
  Cache cache(b, h_kv, prompt + tokens, d, a.paged, page_size);
  {
    const std::vector<float> q = randn(b * h * prompt * d, rng), kn = randn(b * h_kv * prompt * d, rng),
                             vn = randn(kn.size(), rng);
    std::vector<float> o(q.size());
    const auto t0 = std::chrono::steady_clock::now();
    cache.attend(q, h, prompt, kn.data(), vn.data(), o.data(), opt, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("prefill: {} tokens in {:.1f} ms ({:.0f} tokens/s)\n", prompt, s * 1e3, b * prompt / s);
  }

  std::vector<double> step_s;
  std::vector<float> q, o(static_cast<std::size_t>(b * h * d));
  for (std::int64_t step = 0; step < tokens; ++step) {
    q = randn(b * h * d, rng);
    const std::vector<float> kn = randn(b * h_kv * d, rng), vn = randn(kn.size(), rng);
    const auto t0 = std::chrono::steady_clock::now();
    cache.attend(q, h, 1, kn.data(), vn.data(), o.data(), opt, false);
    step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The last step again through the oracle (no append: the cache already holds it).
  cache.lens = std::vector<std::int64_t>(static_cast<std::size_t>(b), cache.lens[0] - 1);
  std::vector<float> kn_last(static_cast<std::size_t>(b * h_kv * d)), vn_last(kn_last.size());
  std::vector<double> o_ref(o.size());
  {
    Options ref = opt;
    ref.isa = Isa::automatic;
    cache.lens = std::vector<std::int64_t>(static_cast<std::size_t>(b), prompt + tokens);
    std::vector<float> o_ref_f(o.size());
    // reference=true with no new tokens: attend to all prompt + tokens keys.
    const TensorView qv = TensorView::contiguous(q.data(), {b, h, 1, d});
    const TensorView ov = TensorView::contiguous(o_ref.data(), {b, h, 1, d});
    const TensorView lv = TensorView::contiguous(cache.lens.data(), DType::i64, {b});
    if (cache.paged) {
      const std::int64_t num_pages = b * cache.max_pages;
      attention_paged(qv, TensorView::contiguous(cache.k.data(), {num_pages, page_size, h_kv, d}),
                      TensorView::contiguous(cache.v.data(), {num_pages, page_size, h_kv, d}),
                      TensorView::contiguous(cache.table.data(), DType::i32, {b, cache.max_pages}), lv, {}, {}, ov, ref,
                      true);
    } else {
      attention_kvcache(qv, TensorView::contiguous(cache.k.data(), {b, h_kv, cache.cap, d}),
                        TensorView::contiguous(cache.v.data(), {b, h_kv, cache.cap, d}), lv, {}, {}, ov, ref, true);
    }
  }
  double err = 0;
  for (std::size_t i = 0; i < o.size(); ++i) err = std::max(err, std::abs(o[i] - o_ref[i]));

  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double total = std::accumulate(step_s.begin(), step_s.end(), 0.0);
  // Bytes of K and V read by the median step: the cache length then is about prompt + tokens/2.
  const double kv_len = static_cast<double>(prompt) + static_cast<double>(tokens) / 2;
  const double bytes = 2.0 * b * h_kv * kv_len * d * 4;
  const double gbs = bytes / median / 1e9;
  fmt::print("decode:  {} steps, median {:.3f} ms/step, {:.0f} tokens/s ({} sequences)\n", tokens, median * 1e3,
             b * tokens / total, b);
  fmt::print("KV read: {:.1f} MB per step, {:.1f} GB/s = {:.0f}% of the measured bandwidth\n", bytes / 1e6, gbs,
             100 * gbs / bw);
  fmt::print("last step vs the float64 oracle: max |difference| = {:.3g}\n", err);
  if (!(err < 1e-4)) {
    fmt::print(stderr, "sdpa decode: the last step differs from the oracle by {:.3g}\n", err);
    return kExitFailure;
  }
  return kExitOk;
}

const Registrar kRegistrar{Command{
    "decode",
    "Simulate token generation against a KV cache and report decode throughput",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<DecodeArgs>();
      sub.add_option("--prompt", a->prompt, "Tokens prefilled into the cache")->capture_default_str();
      sub.add_option("--tokens", a->tokens, "Decode steps, one query token each")->capture_default_str();
      sub.add_option("--batch", a->batch, "Sequences decoded together (B)")->capture_default_str();
      sub.add_option("--heads", a->heads, "Query heads H")->capture_default_str();
      sub.add_option("--kv-heads", a->kv_heads, "K/V heads Hkv (GQA when < H)")->capture_default_str();
      sub.add_option("--d", a->d, "Head size d")->capture_default_str();
      sub.add_flag("--paged", a->paged, "Store the cache in pages (block table, shuffled page order)");
      sub.add_option("--page-size", a->page_size, "Keys per page with --paged")->capture_default_str();
      sub.add_option("--threads", a->threads, "Worker threads, 0 = one per hardware thread")->capture_default_str();
      sub.add_option("--isa", a->isa, "Kernel instruction set: " + isa_choices())->capture_default_str();
      return [a] {
        try {
          return run_decode(*a);
        } catch (const Error& e) {
          // The library's working memory grows with the head size, and O is
          // the one array it names for it; here O is sized by --d.
          if (e.arg() != "o") throw;
          throw CliError(kExitFailure, fmt::format("--d {}: expected {}, got {}", a->d, e.expected(), e.got()));
        }
      };
    },
    50,
}};

}  // namespace
}  // namespace sdpa::cli
