// `sdpa decode`: simulated token generation against a KV cache.
//
// Prefills a cache with --prompt random tokens (one causal call that appends
// them), then decodes --tokens steps one query at a time, each appending its
// own key and value, through the contiguous or the paged cache. The last step
// is checked against the float64 oracle. The cache is held in --kv-dtype
// (float32, float16, bfloat16, or int8 with one float16 scale per --kv-group
// values, as ggml's Q8_0); the library's append converts or quantises the new
// keys and values into it. Decode is memory-bound: every step reads the whole
// cache once (each K/V head once for all the query heads that share it), so
// the figure of merit is KV bytes read per second (values and scales) against
// the DRAM read bandwidth measured in the same run.
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
  std::string kv_dtype = "f32", kv_group = "32";
  bool paged = false;
};

// How the cache stores keys and values: the element type and, for int8, the
// group size G (one float16 scale per G consecutive values of a row).
struct KvFormat {
  DType dtype = DType::f32;
  std::int64_t group = 0;  // int8 only

  bool quantised() const { return dtype == DType::i8; }
  // Bytes of `rows` rows of d elements, scales included (saturating).
  std::uint64_t bytes(std::uint64_t rows, std::uint64_t d) const {
    const std::uint64_t values = mul_sat(mul_sat(rows, d), dtype_size(dtype));
    if (!quantised()) return values;
    return add_sat(values, mul_sat(mul_sat(rows, d / static_cast<std::uint64_t>(group)), sizeof(std::uint16_t)));
  }
  std::string describe() const {
    if (!quantised()) return dtype_name(dtype);
    return fmt::format("int8 with a float16 scale per {} values", group);
  }
};

KvFormat parse_kv_format(const DecodeArgs& a, std::int64_t d) {
  KvFormat f;
  const std::int64_t group = parse_integer("--kv-group", a.kv_group, 1);  // read always, used with i8
  if (a.kv_dtype == "f32") {
    f.dtype = DType::f32;
  } else if (a.kv_dtype == "f16") {
    f.dtype = DType::f16;
  } else if (a.kv_dtype == "bf16") {
    f.dtype = DType::bf16;
  } else if (a.kv_dtype == "i8") {
    f.dtype = DType::i8;
    if (d % group != 0)
      throw UsageError(fmt::format("--kv-group: expected a divisor of --d={} (values per scale), got {}", d, group));
    f.group = group;
  } else {
    throw UsageError(fmt::format("--kv-dtype: expected f32, f16, bf16 or i8, got '{}'", a.kv_dtype));
  }
  return f;
}

struct Cache {
  std::int64_t b, h_kv, cap, d, page_size, max_pages;
  bool paged;
  KvFormat format;
  // Values, contiguous [B, Hkv, cap, d] or pages [num_pages, page_size, Hkv, d],
  // and for int8 their float16 scales, in the same layout with d / G columns.
  std::vector<std::byte> k, v, k_scales, v_scales;
  std::vector<std::int32_t> table;  // [B, max_pages], pages handed out in a shuffled order
  std::vector<std::int64_t> lens;

  Cache(std::int64_t b_, std::int64_t h_kv_, std::int64_t cap_, std::int64_t d_, bool paged_, std::int64_t ps,
        KvFormat f)
      : b(b_), h_kv(h_kv_), cap(cap_), d(d_), page_size(ps), max_pages((cap_ + ps - 1) / ps), paged(paged_),
        format(f), lens(static_cast<std::size_t>(b_), 0) {
    const std::size_t rows = static_cast<std::size_t>(b * h_kv * (paged ? max_pages * ps : cap));
    k.resize(rows * static_cast<std::size_t>(d) * dtype_size(format.dtype));
    v.resize(k.size());
    if (format.quantised()) {
      k_scales.resize(rows * static_cast<std::size_t>(d / format.group) * sizeof(std::uint16_t));
      v_scales.resize(k_scales.size());
    }
    if (paged) {
      table.resize(static_cast<std::size_t>(b * max_pages));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(7));
    }
  }

  // K or V (or their scales: `width` d / G, float16) in the cache's layout.
  TensorView view(std::vector<std::byte>& x, DType dtype, std::int64_t width) const {
    if (paged) return TensorView::contiguous(x.data(), dtype, {b * max_pages, page_size, h_kv, width});
    return TensorView::contiguous(x.data(), dtype, {b, h_kv, cap, width});
  }

  // One call: append k_new/v_new (n_new tokens) and attend with q; without
  // them, attend to the lens[b] keys there are.
  void attend(const float* q, std::int64_t h, std::int64_t n_new, const float* k_new, const float* v_new,
              const TensorView& o, Options opt, bool reference) {
    const TensorView qv = TensorView::contiguous(q, {b, h, n_new, d});
    const TensorView kn = k_new ? TensorView::contiguous(k_new, {b, h_kv, n_new, d}) : TensorView();
    const TensorView vn = v_new ? TensorView::contiguous(v_new, {b, h_kv, n_new, d}) : TensorView();
    const TensorView lv = TensorView::contiguous(lens.data(), DType::i64, {b});
    const TensorView kc = view(k, format.dtype, d), vc = view(v, format.dtype, d);
    if (format.quantised()) {
      opt.k_scales = view(k_scales, DType::f16, d / format.group);
      opt.v_scales = view(v_scales, DType::f16, d / format.group);
    }
    if (paged) {
      attention_paged(qv, kc, vc, TensorView::contiguous(table.data(), DType::i32, {b, max_pages}), lv, kn, vn, o, opt,
                      reference);
    } else {
      attention_kvcache(qv, kc, vc, lv, kn, vn, o, opt, reference);
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

// Bytes the run holds at once (saturating): the K and V caches (values and
// scales), and the prefill's float32 Q, O, new keys and values; and the pages
// the int32 block table must be able to number.
struct Footprint {
  std::uint64_t bytes, pages;
};
Footprint footprint(const std::array<std::int64_t, 7>& x, bool paged, const KvFormat& format) {
  const auto [b, h, h_kv, prompt, tokens, d, ps] = x;
  const std::uint64_t cap = add_sat(prompt, tokens);
  const std::uint64_t pages_per_seq = paged ? cap / ps + (cap % ps != 0) : 0;
  const std::uint64_t rows = paged ? mul_sat(pages_per_seq, ps) : cap;
  const std::uint64_t cache = format.bytes(mul_sat(mul_sat(b, h_kv), rows), d);
  const std::uint64_t q = mul_sat(mul_sat(mul_sat(b, h), prompt), d), kv_new = mul_sat(mul_sat(mul_sat(b, h_kv), prompt), d);
  const std::uint64_t floats = add_sat(mul_sat(2, q), mul_sat(2, kv_new));
  return {add_sat(mul_sat(2, cache), mul_sat(floats, sizeof(float))), mul_sat(b, pages_per_seq)};
}

// Checked before any work: the sizes the flags imply must fit in memory (and
// the page count in the int32 block table). The flag named is the one whose
// default would shrink the run the most.
void check_sizes(const DecodeArgs& a, const std::array<std::int64_t, 7>& x, const KvFormat& format) {
  const Footprint f = footprint(x, a.paged, format);
  const bool too_many_pages = f.pages > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  const std::uint64_t have = physical_memory_bytes();
  if (f.bytes <= have && !too_many_pages) return;
  std::size_t culprit = 0;
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] <= kSizeFlags[i].fallback) continue;
    std::array<std::int64_t, 7> y = x;
    y[i] = kSizeFlags[i].fallback;
    const Footprint g = footprint(y, a.paged, format);
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
  const KvFormat format = parse_kv_format(a, d);
  check_sizes(a, {b, h, h_kv, prompt, tokens, d, page_size}, format);
  const Isa isa = parse_isa(a.isa);
  const int t = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Options opt;
  opt.isa = isa;
  opt.threads = t;
  opt.causal = true;

  fmt::print("sdpa decode: B={} H={} Hkv={} d={}, prompt {} tokens, {} decode steps, {} cache{} of {}, {} threads, "
             "isa {}\n",
             b, h, h_kv, d, prompt, tokens, a.paged ? "paged" : "contiguous",
             a.paged ? fmt::format(" (page size {})", page_size) : "", format.describe(), t,
             isa_name(resolve_isa(isa)));
  const double bw = sdpa::bench::measure_read_bandwidth_gbs(t);
  fmt::print("DRAM read bandwidth ({} threads): {:.1f} GB/s\n", t, bw);

  std::mt19937_64 rng(2026);
  Cache cache(b, h_kv, prompt + tokens, d, a.paged, page_size, format);
  {
    const std::vector<float> q = randn(b * h * prompt * d, rng), kn = randn(b * h_kv * prompt * d, rng),
                             vn = randn(kn.size(), rng);
    std::vector<float> o(q.size());
    const auto t0 = std::chrono::steady_clock::now();
    cache.attend(q.data(), h, prompt, kn.data(), vn.data(), TensorView::contiguous(o.data(), {b, h, prompt, d}), opt,
                 false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("prefill: {} tokens in {:.1f} ms ({:.0f} tokens/s)\n", prompt, s * 1e3, b * prompt / s);
  }

  std::vector<double> step_s;
  std::vector<float> q, o(static_cast<std::size_t>(b * h * d));
  for (std::int64_t step = 0; step < tokens; ++step) {
    q = randn(b * h * d, rng);
    const std::vector<float> kn = randn(b * h_kv * d, rng), vn = randn(kn.size(), rng);
    const auto t0 = std::chrono::steady_clock::now();
    cache.attend(q.data(), h, 1, kn.data(), vn.data(), TensorView::contiguous(o.data(), {b, h, 1, d}), opt, false);
    step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The last step again through the oracle, on the cache as stored (no
  // append: it already holds the step's key and value).
  std::vector<double> o_ref(o.size());
  {
    Options ref = opt;
    ref.isa = Isa::automatic;
    cache.attend(q.data(), h, 1, nullptr, nullptr, TensorView::contiguous(o_ref.data(), {b, h, 1, d}), ref, true);
  }
  double err = 0;
  for (std::size_t i = 0; i < o.size(); ++i) err = std::max(err, std::abs(o[i] - o_ref[i]));

  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double total = std::accumulate(step_s.begin(), step_s.end(), 0.0);
  // Bytes of K and V (values and scales) read by the median step: the cache
  // length then is about prompt + tokens/2.
  const double kv_len = static_cast<double>(prompt) + static_cast<double>(tokens) / 2;
  const double token_bytes = 2.0 * static_cast<double>(format.bytes(static_cast<std::uint64_t>(b * h_kv), d)) / b;
  const double bytes = b * kv_len * token_bytes;
  const double gbs = bytes / median / 1e9;
  fmt::print("decode:  {} steps, median {:.3f} ms/step, {:.0f} tokens/s ({} sequences)\n", tokens, median * 1e3,
             b * tokens / total, b);
  fmt::print("KV read: {:.1f} MB per step ({:.0f} bytes per cached token, K and V{}), {:.1f} GB/s = {:.0f}% of the "
             "measured bandwidth\n",
             bytes / 1e6, token_bytes, format.quantised() ? " with their scales" : "", gbs, 100 * gbs / bw);
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
      sub.add_option("--kv-dtype", a->kv_dtype,
                     "Element type of the K/V cache: f32, f16, bf16, or i8 (int8 with float16 scales, see "
                     "--kv-group); the new keys and values are converted or quantised as they are appended")
          ->type_name("f32|f16|bf16|i8")
          ->capture_default_str();
      sub.add_option("--kv-group", a->kv_group, "With --kv-dtype i8: values per float16 scale, dividing --d")
          ->type_name("G")
          ->capture_default_str();
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
