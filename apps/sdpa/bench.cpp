// sdpa bench: sdpa against the machine's own ceilings and a BLAS baseline, in
// one run.
//
// For the same thread count it measures (a) the FMA peak (independent FMA
// chains), (b) DRAM read bandwidth, then per shape (c) sdpa and (d) the
// baseline everyone writes first: scores materialised with OpenBLAS sgemm,
// softmax, sgemm. FLOPs = 4·B·H·Nq·Nkv·d (QKᵀ and PV only), halved for causal
// with Nq = Nkv. Decode shapes (Nq = 1) are memory-bound: they report the K/V
// bytes read per second against the measured bandwidth. Memory: "io MiB" is
// the inputs and outputs; "extra MiB" is how far the process's high-water RSS
// rose above that while sdpa ran (reset through /proc/self/clear_refs once the
// buffers are allocated and touched): sdpa's own workspace and partials.
//
// %peak is against the FMA peak of the ISA whose kernels run (AVX-512 kernels
// against the 16-lane peak), as in bench/attention_bench: both use
// bench/support's fma_peak_gflops and percent_of_peak.
//
// OpenBLAS's worker threads spin for a while after each call; on 2 cores they
// would steal time from the next sdpa measurement, so the baseline runs after
// sdpa for each shape and is followed by a pause that lets them go to sleep.
// The baseline exists only when OpenBLAS was found at configure time
// (SDPA_HAVE_BLAS_BASELINE), --json only with nlohmann-json (SDPA_HAVE_JSON).
//
// --dtype f32,f16,bf16,i8 runs every shape in each storage, one after the
// other, from the same float32 draws: f16 and bf16 hold Q, K, V and O in that
// type; i8 holds K and V as int8 with float16 scales per group of 32 values
// (ggml's q8_0 layout, 34 bytes per 32 values) and Q and O in float32. "vs f32"
// is the f32 row's time over this row's at the same shape (> 1: faster), so
// ratios come from one run. For decode, GB/s counts the bytes actually read:
// K/V values plus scales. %peak stays against the float32 FMA peak. The
// OpenBLAS baseline is float32 and runs once per shape; each row's speedup is
// against it.
//
// Peers, each in its own process, shape by shape, after sdpa: PyTorch's
// scaled_dot_product_attention in f32, f16 or bf16 (with --python or --peers,
// through scripts/peer_bench.py), onnxruntime's ONNX Attention-23 on its CPU
// provider in f32 and f16 (--peers, the same script), both for prefill and
// decode rows, and ggml's CPU flash_attn_ext with K/V in f32, f16, bf16 or
// q8_0 (for i8) for the decode rows (--ggml: the ggml_flash_attn program of
// bench/peers, built with -DSDPA_GGML_DIR). "vs torch", "vs ort" and "vs ggml"
// are the peer's time over sdpa's (above 1: sdpa is faster).
//
// --backward times the backward pass instead (dQ, dK, dV from the forward's O
// and lse, which are computed once, untimed): FLOPs = 10·B·H·Nq·Nkv·d (the five
// products QKᵀ, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K), halved for causal. Its peer is
// PyTorch's CPU backward of scaled_dot_product_attention, timed in the same
// run, shape by shape, by scripts/peer_bench.py (carried in the binary) under
// the Python of --python, when torch is importable there.
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "cpu/dispatch.h"
#include "io/npy.h"
#include "output_files.h"
#include "peer_bench_py.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"
#include "support/machine.h"
#if SDPA_HAVE_BLAS_BASELINE
#include "support/blas_baseline.h"
#endif
#if SDPA_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

namespace sdpa::cli {
namespace {

struct Shape {
  std::string kind;  // "prefill" or "decode"
  std::int64_t b, h, h_kv, n_q, n_kv, d;
  bool causal;
};

// The storage of a row (--dtype).
enum class Storage : std::uint8_t { f32, f16, bf16, i8 };
constexpr std::array<const char*, 4> kStorageNames = {"f32", "f16", "bf16", "i8"};
// i8 rows: values per float16 scale (ggml's q8_0 block).
constexpr std::int64_t kI8Group = 32;

const char* storage_name(Storage st) { return kStorageNames[static_cast<int>(st)]; }

// --dtype's values, in the order given, each once.
std::vector<Storage> parse_storages(const std::vector<std::string>& names) {
  std::vector<Storage> out;
  for (const std::string& n : names) {
    const auto it = std::find(kStorageNames.begin(), kStorageNames.end(), n);
    if (it == kStorageNames.end()) throw UsageError("--dtype: expected f32, f16, bf16 or i8, got '" + n + "'");
    const Storage st = static_cast<Storage>(it - kStorageNames.begin());
    if (std::find(out.begin(), out.end(), st) == out.end()) out.push_back(st);
  }
  if (out.empty()) throw UsageError("--dtype: expected f32, f16, bf16 or i8, got nothing");
  return out;
}

struct Row {
  Shape s;
  Storage st = Storage::f32;
  std::string error;  // why this row did not run (the library refused the storage); empty when it ran
  double ms = 0, gflops = 0, pct_peak = 0, gbs = 0, pct_bw = 0;
  double vs_f32 = 0;  // the f32 row's ms over this row's (0: no f32 row)
  double blas_ms = 0, speedup = 0;
  double peer_ms = 0, vs_peer = 0;  // PyTorch's time and its ratio to sdpa's (0: not run)
  double ort_ms = 0, vs_ort = 0;    // onnxruntime's (0: not run)
  double ggml_ms = 0, vs_ggml = 0;  // ggml's (0: not run)
  // --paged (decode rows): the same keys in a paged cache, and its time over
  // the contiguous one's, the two timed alternately (0: not run).
  double paged_ms = 0, vs_contiguous = 0;
  double io_mib = 0, extra_mib = 0;
};

// A peer timed in its own process, one shape per run: a program that prints
// one JSON line {"peer": ..., "ms": median, "kernel": ...}. Either
// scripts/peer_bench.py under a chosen Python (written to a temporary file
// once), or a program run as it is (bench/peers' ggml_flash_attn).
class Peer {
 public:
  // `program` runs `script` (Python source, written to a temporary file) or, without one, runs as it is.
  explicit Peer(std::string program, const char* script = nullptr) : program_(std::move(program)) {
    if (!script) {
      ready_ = true;
      return;
    }
    std::string dir = std::filesystem::temp_directory_path().string();
    std::string templ = dir + "/sdpa-peer-XXXXXX.py";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const int fd = mkstemps(buf.data(), 3);
    if (fd < 0) return;
    const std::size_t n = std::strlen(script);
    const bool ok = ::write(fd, script, n) == static_cast<ssize_t>(n);
    ::close(fd);
    script_ = buf.data();
    ready_ = ok;
  }
  ~Peer() {
    if (!script_.empty()) ::unlink(script_.c_str());
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // The median time in ms, or a negative value with `why` set.
  double run(const std::string& args, std::string& why) const {
    if (!ready_) {
      why = "could not write the peer script to the temporary directory";
      return -1;
    }
    std::string cmd = quote(program_);
    if (!script_.empty()) cmd += " " + quote(script_);
    cmd += " " + args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) {
      why = "could not start " + program_;
      return -1;
    }
    std::string out;
    std::array<char, 4096> chunk;
    while (std::size_t n = std::fread(chunk.data(), 1, chunk.size(), f)) out.append(chunk.data(), n);
    const int status = ::pclose(f);
    const std::size_t at = out.find("\"ms\": ");
    if (status != 0 || at == std::string::npos) {
      const std::size_t e = out.find("\"error\": \"");
      why = e != std::string::npos ? out.substr(e + 10, out.find('"', e + 10) - e - 10)
                                   : "failed: " + out.substr(0, std::min<std::size_t>(out.size(), 200));
      return -1;
    }
    const std::size_t k = out.find("\"kernel\": \"");
    if (k != std::string::npos) kernel = out.substr(k + 11, out.find('"', k + 11) - k - 11);
    return std::strtod(out.c_str() + at + 6, nullptr);
  }
  const std::string& name() const { return program_; }
  mutable std::string kernel;  // what the peer reported it ran

 private:
  static std::string quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
  }
  std::string program_, script_;
  bool ready_ = false;
};

// Whether `program` names an executable file: a path, or a name found on PATH.
bool runnable(const std::string& program) {
  auto is_exe = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return is_exe(program);
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = end > at ? dirs.substr(at, end - at) : ".";
    if (is_exe(dir + "/" + program)) return true;
    at = end + 1;
  }
  return false;
}

// --python's default: $SDPA_PEER_PYTHON, the project's .venv when run from
// its root, else python3 on PATH.
std::string default_python() {
  if (const char* e = std::getenv("SDPA_PEER_PYTHON"); e && *e) return e;
  if (::access(".venv/bin/python3", X_OK) == 0) return ".venv/bin/python3";
  return "python3";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// VmHWM / VmRSS from /proc/self/status, in MiB (0 where unavailable).
double proc_status_mib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
  return 0;
}

void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (f) f << "5";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Warm-up before timing: page faults, thread start-up, caches; and, after a
// peer's process has run (PyTorch, onnxruntime), long enough for the machine
// to settle: the calls right after one measured up to 2x slower. At least
// one call, and calls for at least this long.
constexpr double kWarmSeconds = 0.2;

template <class F>
double time_ms(int repeats, F&& f) {
  const double w0 = now_s();
  do f();
  while (now_s() - w0 < kWarmSeconds);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_s();
    f();
    t.push_back((now_s() - t0) * 1e3);
  }
  return median(t);
}

// Prefill: H = 8 at each N, d 64 and 128, causal or not. Decode (Nq = 1,
// d = 128) at each cache length: GQA (H = 32, Hkv = 8) and MHA (H = Hkv = 32).
std::vector<Shape> default_shapes(const std::string& which, const std::vector<std::int64_t>& ns,
                                  const std::vector<std::int64_t>& nkvs) {
  std::vector<Shape> out;
  if (which == "all" || which == "prefill")
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (std::int64_t n : ns) out.push_back({"prefill", 1, 8, 8, n, n, d, causal});
  if (which == "all" || which == "decode")
    for (std::int64_t n : nkvs)
      for (std::int64_t h_kv : {8, 32}) out.push_back({"decode", 1, 32, h_kv, 1, n, 128, false});
  return out;
}

// A shape's float32 inputs, drawn once and stored in each --dtype in turn.
struct Inputs {
  std::vector<float> q, k, v;
};

Inputs draw(const Shape& s) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  Inputs in{std::vector<float>(s.b * s.h * s.n_q * s.d), std::vector<float>(s.b * s.h_kv * s.n_kv * s.d), {}};
  in.v.resize(in.k.size());
  for (auto* x : {&in.q, &in.k, &in.v})
    for (float& e : *x) e = normal(rng);
  return in;
}

// x converted to float16 or bfloat16 by the library (round to nearest even).
std::vector<std::uint16_t> to_16bit(const std::vector<float>& x, DType t) {
  std::vector<std::uint16_t> out(x.size());
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  convert(TensorView::contiguous(x.data(), DType::f32, {n}), TensorView::contiguous(out.data(), t, {n}));
  return out;
}

// x [rows, d] quantised by the library: int8 values and one float16 scale per kI8Group values.
void quantize_i8(const std::vector<float>& x, std::int64_t d, std::vector<std::int8_t>& values,
                 std::vector<std::uint16_t>& scales) {
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  values.resize(x.size());
  scales.resize(x.size() / kI8Group);
  quantize_int8(TensorView::contiguous(x.data(), DType::f32, {rows, d}),
                TensorView::contiguous(values.data(), DType::i8, {rows, d}),
                TensorView::contiguous(scales.data(), DType::f16, {rows, d / kI8Group}));
}

// Q, K, V, O (and the int8 scales) of one shape in one storage, with the
// views attention takes.
struct Stored {
  std::vector<float> o32;
  std::vector<std::uint16_t> q16, k16, v16, o16, k_scales, v_scales;
  std::vector<std::int8_t> k8, v8;
  TensorView q, k, v, o, ks, vs;
  double io_bytes = 0;  // Q, K, V, O and scales
  double kv_bytes = 0;  // K and V values and scales: what a decode call reads
};

Stored store(const Shape& s, const Inputs& in, Storage st) {
  Stored x;
  const std::int64_t qs[] = {s.b, s.h, s.n_q, s.d}, kvs[] = {s.b, s.h_kv, s.n_kv, s.d};
  const std::int64_t scs[] = {s.b, s.h_kv, s.n_kv, s.d / kI8Group};
  const double nq = static_cast<double>(in.q.size()), nkv = static_cast<double>(in.k.size());
  switch (st) {
    case Storage::f32:
      x.o32.resize(in.q.size());
      x.q = TensorView::contiguous(in.q.data(), DType::f32, qs);
      x.k = TensorView::contiguous(in.k.data(), DType::f32, kvs);
      x.v = TensorView::contiguous(in.v.data(), DType::f32, kvs);
      x.o = TensorView::contiguous(x.o32.data(), DType::f32, qs);
      x.kv_bytes = 2 * nkv * 4;
      x.io_bytes = 2 * nq * 4 + x.kv_bytes;
      break;
    case Storage::f16:
    case Storage::bf16: {
      const DType t = st == Storage::f16 ? DType::f16 : DType::bf16;
      x.q16 = to_16bit(in.q, t);
      x.k16 = to_16bit(in.k, t);
      x.v16 = to_16bit(in.v, t);
      x.o16.resize(in.q.size());
      x.q = TensorView::contiguous(x.q16.data(), t, qs);
      x.k = TensorView::contiguous(x.k16.data(), t, kvs);
      x.v = TensorView::contiguous(x.v16.data(), t, kvs);
      x.o = TensorView::contiguous(x.o16.data(), t, qs);
      x.kv_bytes = 2 * nkv * 2;
      x.io_bytes = 2 * nq * 2 + x.kv_bytes;
      break;
    }
    case Storage::i8:
      quantize_i8(in.k, s.d, x.k8, x.k_scales);
      quantize_i8(in.v, s.d, x.v8, x.v_scales);
      x.o32.resize(in.q.size());
      x.q = TensorView::contiguous(in.q.data(), DType::f32, qs);
      x.k = TensorView::contiguous(x.k8.data(), DType::i8, kvs);
      x.v = TensorView::contiguous(x.v8.data(), DType::i8, kvs);
      x.o = TensorView::contiguous(x.o32.data(), DType::f32, qs);
      x.ks = TensorView::contiguous(x.k_scales.data(), DType::f16, scs);
      x.vs = TensorView::contiguous(x.v_scales.data(), DType::f16, scs);
      x.kv_bytes = 2 * (nkv + nkv / kI8Group * 2);
      x.io_bytes = 2 * nq * 4 + x.kv_bytes;
      break;
  }
  return x;
}

// What every forward row is measured with.
struct Setup {
  Isa isa;
  int threads, repeats;
  bool round_p;
  double peak, bw;
};

// A row's rates from its time: GFLOP/s and % of the FMA peak, K/V GB/s and % of the bandwidth.
void set_rates(Row& row, double kv_bytes, const Setup& u) {
  const Shape& s = row.s;
  double flop = 4.0 * s.b * s.h * s.n_q * s.n_kv * s.d;
  if (s.causal && s.n_q == s.n_kv) flop /= 2;
  row.gflops = flop / row.ms / 1e6;
  row.pct_peak = sdpa::bench::percent_of_peak(row.gflops, u.peak);
  row.gbs = kv_bytes / row.ms / 1e6;
  row.pct_bw = 100 * row.gbs / u.bw;
}

Row measure(const Shape& s, const Inputs& in, Storage st, const Setup& u) {
  Row row;
  row.s = s;
  row.st = st;
  const Stored x = store(s, in, st);
  row.io_mib = x.io_bytes / (1 << 20);
  Options opt;
  opt.causal = s.causal;
  opt.threads = u.threads;
  opt.isa = u.isa;
  opt.round_p = u.round_p;
  opt.k_scales = x.ks;
  opt.v_scales = x.vs;
  reset_peak_rss();
  const double rss0 = proc_status_mib("VmRSS:");
  try {
    row.ms = time_ms(u.repeats, [&] { attention(x.q, x.k, x.v, x.o, opt); });
  } catch (const Error& e) {
    row.error = e.what();
    return row;
  }
  row.extra_mib = std::max(0.0, proc_status_mib("VmHWM:") - rss0);
  set_rates(row, x.kv_bytes, u);
  return row;
}

// A decode row again over a paged cache (attention_paged, no new keys):
// the same K/V values in pages [num_pages, page, Hkv, d] handed out in a
// shuffled order (as a serving cache's free list leaves them), timed
// alternately with the contiguous call, so that both see the same machine:
// row.ms (and its rates) becomes the contiguous median of these rounds,
// row.paged_ms the paged one, row.vs_contiguous their ratio.
void measure_paged(const Shape& s, const Inputs& in, Storage st, const Setup& u, std::int64_t page, Row& row) {
  Stored x = store(s, in, st);
  const std::int64_t pages_per_seq = (s.n_kv + page - 1) / page, pages = s.b * pages_per_seq;
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages));
  for (std::int64_t i = 0; i < pages; ++i) table[i] = static_cast<std::int32_t>(i);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  // Row (b, hk, j) of a contiguous [B, Hkv, Nkv, w] array of `es`-byte
  // elements, copied into its page slot [page_of(b, j), j % page, hk].
  auto paged = [&](const TensorView& t, std::int64_t w) {
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype)), row = w * es;
    std::vector<std::byte> out(static_cast<std::size_t>(pages * page * s.h_kv * row));
    const auto* src = static_cast<const std::byte*>(t.data);
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t hk = 0; hk < s.h_kv; ++hk)
        for (std::int64_t j = 0; j < s.n_kv; ++j) {
          const std::int64_t slot = (table[b * pages_per_seq + j / page] * page + j % page) * s.h_kv + hk;
          std::memcpy(out.data() + slot * row, src + ((b * s.h_kv + hk) * s.n_kv + j) * row, static_cast<std::size_t>(row));
        }
    return out;
  };
  std::vector<std::byte> kp = paged(x.k, s.d), vp = paged(x.v, s.d), ksp, vsp;
  Options opt;
  opt.threads = u.threads;
  opt.isa = u.isa;
  opt.round_p = u.round_p;
  Options paged_opt = opt;
  opt.k_scales = x.ks;
  opt.v_scales = x.vs;
  const std::int64_t ng = s.d / kI8Group;
  if (x.ks.data) {
    ksp = paged(x.ks, ng);
    vsp = paged(x.vs, ng);
    paged_opt.k_scales = TensorView::contiguous(ksp.data(), x.ks.dtype, {pages, page, s.h_kv, ng});
    paged_opt.v_scales = TensorView::contiguous(vsp.data(), x.vs.dtype, {pages, page, s.h_kv, ng});
  }
  const TensorView kv = TensorView::contiguous(kp.data(), x.k.dtype, {pages, page, s.h_kv, s.d});
  const TensorView vv = TensorView::contiguous(vp.data(), x.v.dtype, {pages, page, s.h_kv, s.d});
  const TensorView tv = TensorView::contiguous(table.data(), DType::i32, {s.b, pages_per_seq});
  const std::vector<std::int32_t> lens(static_cast<std::size_t>(s.b), static_cast<std::int32_t>(s.n_kv));
  const TensorView lv = TensorView::contiguous(lens.data(), DType::i32, {s.b});
  std::vector<double> contiguous, paged_times;
  for (int r = 0; r < u.repeats; ++r) {
    double t0 = now_s();
    attention(x.q, x.k, x.v, x.o, opt);
    contiguous.push_back((now_s() - t0) * 1e3);
    t0 = now_s();
    attention_paged(x.q, kv, vv, tv, lv, {}, {}, x.o, paged_opt);
    paged_times.push_back((now_s() - t0) * 1e3);
  }
  row.ms = median(contiguous);
  set_rates(row, x.kv_bytes, u);
  row.paged_ms = median(paged_times);
  row.vs_contiguous = row.paged_ms / row.ms;
}

// The OpenBLAS baseline's time on a shape (float32), or 0 when not built.
double measure_blas(const Shape& s, const Inputs& in, const Setup& u) {
#if SDPA_HAVE_BLAS_BASELINE
  std::vector<float> scratch, ob(in.q.size());
  const double ms = time_ms(u.repeats, [&] {
    sdpa::bench::blas_attention(in.q.data(), in.k.data(), in.v.data(), ob.data(), s.b, s.h, s.h_kv, s.n_q, s.n_kv,
                                s.d, s.d, static_cast<float>(1 / std::sqrt(double(s.d))), s.causal, u.threads,
                                scratch);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return ms;
#else
  (void)s, (void)in, (void)u;
  return 0;
#endif
}

// The peers' arguments for a shape: the same flags for peer_bench.py and ggml_flash_attn.
std::string peer_shape_args(const Shape& s, int threads, int repeats) {
  return fmt::format("--b {} --h {} --hkv {} --nq {} --nkv {} --d {}{} --threads {} --repeats {}", s.b, s.h, s.h_kv,
                     s.n_q, s.n_kv, s.d, s.causal ? " --causal" : "", threads, repeats);
}

// ggml's K/V type for a storage (i8: q8_0, the same bytes per value and scale).
const char* ggml_type(Storage st) {
  switch (st) {
    case Storage::f32: return "f32";
    case Storage::f16: return "f16";
    case Storage::bf16: return "bf16";
    case Storage::i8: return "q8_0";
  }
  return "f32";
}

#if SDPA_HAVE_JSON
// --json's file, written atomically.
void write_json(const std::string& path, const nlohmann::ordered_json& js) {
  const std::string text = js.dump(2) + "\n";
  io::write_file_atomic(path, text.data(), text.size());
  std::printf("\nwrote %s\n", path.c_str());
}

// A shape's sizes as JSON, in the order the tables print them.
nlohmann::ordered_json shape_json(const Shape& s) {
  nlohmann::ordered_json x;
  x["B"] = s.b;
  x["H"] = s.h;
  x["Hkv"] = s.h_kv;
  x["Nq"] = s.n_q;
  x["Nkv"] = s.n_kv;
  x["d"] = s.d;
  x["causal"] = s.causal;
  return x;
}
#endif

Row measure_backward(const Shape& s, const Isa isa, int threads, int repeats, double peak, const Peer* peer) {
  Row row;
  row.s = s;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  const std::size_t nq = s.b * s.h * s.n_q * s.d, nkv = s.b * s.h_kv * s.n_kv * s.d;
  std::vector<float> q(nq), k(nkv), v(nkv), o(nq), go(nq), lse(s.b * s.h * s.n_q), dq(nq), dk(nkv), dv(nkv);
  for (auto* x : {&q, &k, &v, &go})
    for (float& e : *x) e = normal(rng);
  row.io_mib = (4 * q.size() + 4 * k.size() + lse.size()) * 4.0 / (1 << 20);
  Options opt;
  opt.causal = s.causal;
  opt.threads = threads;
  opt.isa = isa;
  const TensorView qv = TensorView::contiguous(q.data(), {s.b, s.h, s.n_q, s.d});
  const TensorView kv = TensorView::contiguous(k.data(), {s.b, s.h_kv, s.n_kv, s.d});
  const TensorView vv = TensorView::contiguous(v.data(), {s.b, s.h_kv, s.n_kv, s.d});
  const TensorView ov = TensorView::contiguous(o.data(), {s.b, s.h, s.n_q, s.d});
  const TensorView lv = TensorView::contiguous(lse.data(), {s.b, s.h, s.n_q});
  opt.lse = lv;
  attention(qv, kv, vv, ov, opt);
  opt.lse = {};
  const Gradients g{TensorView::contiguous(dq.data(), {s.b, s.h, s.n_q, s.d}),
                    TensorView::contiguous(dk.data(), {s.b, s.h_kv, s.n_kv, s.d}),
                    TensorView::contiguous(dv.data(), {s.b, s.h_kv, s.n_kv, s.d}), {}};
  const TensorView gov = TensorView::contiguous(go.data(), {s.b, s.h, s.n_q, s.d});
  reset_peak_rss();
  const double rss0 = proc_status_mib("VmRSS:");
  row.ms = time_ms(repeats, [&] { attention_backward(qv, kv, vv, ov, lv, gov, g, opt); });
  row.extra_mib = std::max(0.0, proc_status_mib("VmHWM:") - rss0);
  double flop = 10.0 * s.b * s.h * s.n_q * s.n_kv * s.d;
  if (s.causal && s.n_q == s.n_kv) flop /= 2;
  row.gflops = flop / row.ms / 1e6;
  row.pct_peak = sdpa::bench::percent_of_peak(row.gflops, peak);
  if (peer) {
    std::string why;
    const double ms = peer->run("torch --pass backward " + peer_shape_args(s, threads, repeats), why);
    if (ms > 0) {
      row.peer_ms = ms;
      row.vs_peer = ms / row.ms;
    }
  }
  return row;
}

int run_backward_bench(const std::vector<Shape>& shapes, Isa isa, int t, int repeats, const std::string& python,
                       bool peers, const std::string& json_path) {
  std::printf("machine: %u hardware threads; measuring the backward pass with %d thread%s, isa %s (kernels %s)\n",
              std::thread::hardware_concurrency(), t, t == 1 ? "" : "s", isa_name(isa), cpu::kernels_for(isa).name);
  const double peak_gflops = sdpa::bench::fma_peak_gflops(isa, t);
  std::printf("FMA peak (float32, %d-lane FMA chains, %d threads): %.1f GFLOP/s\n", sdpa::bench::fma_lanes(isa), t,
              peak_gflops);
  // The peer: probed once on a tiny shape; the bench goes on without it.
  const Peer peer(python, kPeerBenchPy);
  std::string why;
  const bool have_peer = peer.run("torch --pass backward --b 1 --h 1 --hkv 1 --nq 8 --nkv 8 --d 8 --repeats 1", why) > 0;
  if (have_peer)
    std::printf("peer: %s (under %s)\n", peer.kernel.c_str(), python.c_str());
  else
    std::printf("peer: PyTorch not timed: %s under %s (pip install torch in a virtual environment, then --python "
                "PATH/bin/python3)\n",
                why.c_str(), python.c_str());
  if (peers) std::printf("peer: onnxruntime not timed: it has no attention backward\n");
  std::printf("\n");
  std::printf("%-8s %3s %3s %4s %6s %6s %4s %-6s %9s %8s %7s %10s %9s %9s\n", "pass", "B", "H", "Hkv", "Nq", "Nkv",
              "d", "causal", "ms", "GFLOP/s", "%peak", "torch ms", "vs torch", "extra MiB");
  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    const Row r = measure_backward(s, isa, t, repeats, peak_gflops, have_peer ? &peer : nullptr);
    rows.push_back(r);
    std::printf("%-8s %3lld %3lld %4lld %6lld %6lld %4lld %-6s %9.2f %8.1f %6.1f%% %10s %9s %9.1f\n", "backward",
                (long long)s.b, (long long)s.h, (long long)s.h_kv, (long long)s.n_q, (long long)s.n_kv,
                (long long)s.d, s.causal ? "yes" : "no", r.ms, r.gflops, r.pct_peak,
                r.peer_ms > 0 ? fmt::format("{:.2f}", r.peer_ms).c_str() : "-",
                r.peer_ms > 0 ? fmt::format("{:.2f}x", r.vs_peer).c_str() : "-", r.extra_mib);
    std::fflush(stdout);
  }
#if SDPA_HAVE_JSON
  if (!json_path.empty()) {
    nlohmann::ordered_json js;
    js["pass"] = "backward";
    js["threads"] = t;
    js["isa"] = isa_name(isa);
    js["fma_peak_gflops"] = peak_gflops;
    js["peer"] = have_peer ? peer.kernel : "";
    nlohmann::ordered_json& out = js["shapes"] = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json x = shape_json(r.s);
      x["ms"] = r.ms;
      x["gflops"] = r.gflops;
      x["pct_peak"] = r.pct_peak;
      if (r.peer_ms > 0) {
        x["torch_ms"] = r.peer_ms;
        x["vs_torch"] = r.vs_peer;
      }
      x["extra_mib"] = r.extra_mib;
      out.push_back(std::move(x));
    }
    write_json(json_path, js);
  }
#else
  (void)json_path;
#endif
  return kExitOk;
}

// `sdpa bench`'s flags.
struct BenchArgs {
  std::string which = "all";
  std::vector<std::int64_t> ns, nkvs;
  std::vector<std::string> dtypes = {"f32"};
  bool backward = false, baseline = true, round_p = false, peers = false;
  std::string python, ggml, isa = "auto", json;
  int threads = 0, repeats = 3;
  std::int64_t paged = -1;  // --paged: page size (-1: not given, no paged rows)
};

// What a row's storage holds, for the legend above the table.
const char* storage_legend(Storage st) {
  switch (st) {
    case Storage::f32: return "f32: Q, K, V, O float32";
    case Storage::f16: return "f16: Q, K, V, O float16";
    case Storage::bf16: return "bf16: Q, K, V, O bfloat16";
    case Storage::i8: return "i8: K, V int8 with a float16 scale per 32 values (q8_0's bytes), Q, O float32";
  }
  return "";
}

std::string cell(bool have, double x, const char* format) {
  return have ? fmt::format(fmt::runtime(format), x) : std::string("-");
}

// Which peers' columns the forward table has.
struct PeerColumns {
  bool torch = false, ort = false, ggml = false, paged = false;
};

// The forward table's lines: fixed columns, then the peers' when they run.
std::string header_line(const PeerColumns& c) {
  std::string line = fmt::format("{:<8} {:>3} {:>3} {:>4} {:>6} {:>6} {:>4} {:<6} {:<5} {:>9} {:>8} {:>7} {:>8} {:>6} "
                                 "{:>7} {:>9} {:>8}",
                                 "shape", "B", "H", "Hkv", "Nq", "Nkv", "d", "causal", "dtype", "ms", "GFLOP/s", "%peak",
                                 "GB/s", "%bw", "vs f32", "blas ms", "speedup");
  if (c.torch) line += fmt::format(" {:>10} {:>9}", "torch ms", "vs torch");
  if (c.ort) line += fmt::format(" {:>9} {:>8}", "ort ms", "vs ort");
  if (c.ggml) line += fmt::format(" {:>9} {:>8}", "ggml ms", "vs ggml");
  if (c.paged) line += fmt::format(" {:>9} {:>9}", "paged ms", "vs contig");
  return line + fmt::format(" {:>9} {:>9}", "io MiB", "extra MiB");
}

std::string row_line(const Row& r, const PeerColumns& c) {
  const Shape& s = r.s;
  const bool ran = r.error.empty(), dec = s.kind == "decode";
  std::string line = fmt::format(
      "{:<8} {:>3} {:>3} {:>4} {:>6} {:>6} {:>4} {:<6} {:<5} {:>9} {:>8} {:>7} {:>8} {:>6} {:>7} {:>9} {:>8}", s.kind,
      s.b, s.h, s.h_kv, s.n_q, s.n_kv, s.d, s.causal ? "yes" : "no", storage_name(r.st), cell(ran, r.ms, "{:.2f}"),
      cell(ran, r.gflops, "{:.1f}"), cell(ran, r.pct_peak, "{:.1f}%"), cell(ran && dec, r.gbs, "{:.1f}"),
      cell(ran && dec, r.pct_bw, "{:.1f}%"), cell(r.vs_f32 > 0, r.vs_f32, "{:.2f}x"),
      cell(r.blas_ms > 0, r.blas_ms, "{:.2f}"), cell(r.speedup > 0, r.speedup, "{:.2f}x"));
  if (c.torch)
    line += fmt::format(" {:>10} {:>9}", cell(r.peer_ms > 0, r.peer_ms, "{:.2f}"),
                        cell(r.vs_peer > 0, r.vs_peer, "{:.2f}x"));
  if (c.ort)
    line += fmt::format(" {:>9} {:>8}", cell(r.ort_ms > 0, r.ort_ms, "{:.2f}"), cell(r.vs_ort > 0, r.vs_ort, "{:.2f}x"));
  if (c.ggml)
    line += fmt::format(" {:>9} {:>8}", cell(r.ggml_ms > 0, r.ggml_ms, "{:.2f}"),
                        cell(r.vs_ggml > 0, r.vs_ggml, "{:.2f}x"));
  if (c.paged)
    line += fmt::format(" {:>9} {:>9}", cell(r.paged_ms > 0, r.paged_ms, "{:.2f}"),
                        cell(r.vs_contiguous > 0, r.vs_contiguous, "{:.2f}x"));
  return line + fmt::format(" {:>9.1f} {:>9}", r.io_mib, cell(ran, r.extra_mib, "{:.1f}"));
}

// A peer probed once on a tiny shape: what it reports it runs, or "" (and
// why, printed) when it fails; the bench goes on without it.
std::string probe(const Peer& peer, const std::string& args, const char* what, const char* hint) {
  std::string why;
  if (peer.run(args, why) > 0) {
    std::printf("peer: %s (%s)\n", peer.kernel.c_str(), peer.name().c_str());
    return peer.kernel;
  }
  std::printf("peer: %s not timed: %s (%s)%s\n", what, why.c_str(), peer.name().c_str(), hint);
  return "";
}

int run_bench(BenchArgs a) {
  std::vector<std::int64_t>& ns = a.ns;
  const std::string& which = a.which;
  const bool backward = a.backward;
  bool baseline = a.baseline;
  if (ns.empty()) ns = backward ? std::vector<std::int64_t>{1024, 4096} : std::vector<std::int64_t>{512, 1024, 2048, 4096, 8192};
  if (a.nkvs.empty()) a.nkvs = {1024, 4096, 16384};
  if (backward && which == "decode") throw UsageError("--shapes: --backward times prefill shapes (all or prefill), got 'decode'");
  if (a.threads < 0) throw UsageError("--threads: expected >= 0, got " + std::to_string(a.threads));
  if (a.repeats < 1) throw UsageError("--repeats: expected >= 1, got " + std::to_string(a.repeats));
  if (a.paged != -1 && a.paged < 1) throw UsageError("--paged: expected a page size >= 1, got " + std::to_string(a.paged));
  if (a.paged > 0 && backward) throw UsageError("--paged: paged rows are decode rows of the forward, not --backward");
  if (which != "all" && which != "prefill" && which != "decode")
    throw UsageError("--shapes: expected all, prefill or decode, got '" + which + "'");
  const std::vector<Storage> storages = parse_storages(a.dtypes);
  if (backward && (storages.size() != 1 || storages[0] != Storage::f32))
    throw UsageError("--dtype: --backward times float32 (f32), got '" + std::string(storage_name(storages.back())) +
                     "'");
  if (backward && !a.ggml.empty()) throw UsageError("--ggml: the ggml peer times the forward pass, not --backward");
  if (!a.ggml.empty()) {
    struct stat st;
    if (::stat(a.ggml.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(a.ggml.c_str(), X_OK) != 0)
      throw UsageError("--ggml: expected the ggml_flash_attn program (cmake -DSDPA_GGML_DIR=..., see README), got '" +
                       a.ggml + "' (not an executable file)");
  }
  if (!a.python.empty() && !runnable(a.python))
    throw UsageError("--python: expected a Python executable (a path, or a name on PATH), got '" + a.python +
                     "' (not an executable file)");
  Isa isa;
  try {
    isa = parse_isa(a.isa);
  } catch (const Error& e) {
    throw cli_error(e);
  }
  isa = resolve_isa(isa);
#if !SDPA_HAVE_JSON
  if (!a.json.empty())
    throw UsageError("--json: this sdpa was built without nlohmann-json; apt-get install nlohmann-json3-dev, then "
                     "re-run cmake and rebuild");
#endif
#if !SDPA_HAVE_BLAS_BASELINE
  if (baseline)
    std::printf("baseline: the OpenBLAS baseline was not built; apt-get install libopenblas-dev, then re-run cmake and "
                "rebuild\n");
  baseline = false;
#endif
  // The sizes --n and --nkv imply, checked before any work: Q, K, V, O of
  // the largest shape in float32, again in a second storage (and the
  // baseline's Nq x Nkv scores).
  for (const std::int64_t n : ns)
    if (n < 1) throw UsageError(fmt::format("--n: expected sequence lengths >= 1, got {}", n));
  for (const std::int64_t n : a.nkvs)
    if (n < 1) throw UsageError(fmt::format("--nkv: expected cache lengths >= 1, got {}", n));
  const bool two_copies = storages.size() > 1 || storages[0] != Storage::f32;
  for (const Shape& s : default_shapes(backward ? "prefill" : which, ns, a.nkvs)) {
    const std::uint64_t q = mul_sat(mul_sat(mul_sat(s.b, s.h), s.n_q), s.d),
                        kv = mul_sat(mul_sat(mul_sat(s.b, s.h_kv), s.n_kv), s.d);
    std::uint64_t bytes = mul_sat(mul_sat(add_sat(mul_sat(2, q), mul_sat(2, kv)), sizeof(float)), two_copies ? 2 : 1);
    if (baseline) bytes = add_sat(bytes, mul_sat(mul_sat(s.n_q, s.n_kv), sizeof(float)));
    const bool dec = s.kind == "decode";
    if (dec && a.paged > 0) bytes = add_sat(bytes, mul_sat(mul_sat(2, kv), 2 * sizeof(float)));  // the paged copies
    check_fits_memory(dec ? "--nkv" : "--n", std::to_string(dec ? s.n_kv : s.n_q), bytes,
                      baseline ? "Q, K, V, O and the baseline's scores" : "Q, K, V and O");
  }
  if (!a.json.empty()) check_destination("--json", a.json);
  const int t = sdpa::bench::resolve_threads(a.threads);
  std::sort(ns.begin(), ns.end());
  std::sort(a.nkvs.begin(), a.nkvs.end());
  if (backward) {
    if (a.python.empty()) a.python = default_python();
    return run_backward_bench(default_shapes("prefill", ns, a.nkvs), isa, t, a.repeats, a.python, a.peers, a.json);
  }

  std::printf("machine: %u hardware threads; measuring with %d thread%s, isa %s (kernels %s)\n",
              std::thread::hardware_concurrency(), t, t == 1 ? "" : "s", isa_name(isa), cpu::kernels_for(isa).name);
  const int lanes = sdpa::bench::fma_lanes(isa);
  const double peak_gflops = sdpa::bench::fma_peak_gflops(isa, t);
  const double read_bw_gbs = sdpa::bench::measure_read_bandwidth_gbs(t);
  std::printf("FMA peak (float32, %d-lane FMA chains, %d threads): %.1f GFLOP/s    DRAM read bandwidth: %.1f GB/s\n",
              lanes, t, peak_gflops, read_bw_gbs);
  // The peers: PyTorch when --python names a Python or --peers is given (the
  // forward table is sdpa's own by default), onnxruntime with --peers, under
  // the same Python; ggml for decode rows with --ggml. Each is probed once on
  // a tiny shape and left out, with a line saying why, when that fails.
  const std::vector<Shape> shapes = default_shapes(which, ns, a.nkvs);
  const bool any_decode = std::any_of(shapes.begin(), shapes.end(), [](const Shape& s) { return s.kind == "decode"; });
  if (a.peers && a.python.empty()) a.python = default_python();
  std::optional<Peer> torch, ort, ggml;
  std::string torch_kernel, ort_kernel, ggml_kernel;
  const char* const tiny = "--pass forward --dtype f32 --b 1 --h 2 --hkv 1 --nq 8 --nkv 8 --d 8 --repeats 1";
  if (!a.python.empty()) {
    torch.emplace(a.python, kPeerBenchPy);
    torch_kernel = probe(*torch, std::string("torch ") + tiny, "PyTorch",
                         " (pip install torch in a virtual environment, then --python PATH/bin/python3)");
    if (torch_kernel.empty()) torch.reset();
  }
  if (a.peers) {
    ort.emplace(a.python, kPeerBenchPy);
    ort_kernel = probe(*ort, std::string("onnxruntime ") + tiny, "onnxruntime",
                       " (pip install onnxruntime onnx in a virtual environment, then --python PATH/bin/python3)");
    if (ort_kernel.empty()) ort.reset();
  }
  if (!a.ggml.empty() && any_decode) {
    ggml.emplace(a.ggml);
    // Probed in the first storage timed, so the line names the K/V type of its rows.
    ggml_kernel = probe(*ggml, fmt::format("--b 1 --h 1 --hkv 1 --nq 1 --nkv 64 --d 64 --type {} --repeats 1",
                                           ggml_type(storages[0])),
                        "ggml", "");
    if (ggml_kernel.empty()) ggml.reset();
  }
  std::printf("dtype: ");
  for (std::size_t i = 0; i < storages.size(); ++i)
    std::printf("%s%s", i ? "; " : "", storage_legend(storages[i]));
  std::printf("%s\n\n", a.round_p ? "; P rounded to 16 bits before P·V (--round-p)" : "");

  const Setup setup{isa, t, a.repeats, a.round_p, peak_gflops, read_bw_gbs};
  const PeerColumns columns{bool(torch), bool(ort), bool(ggml), a.paged > 0 && any_decode};
  std::printf("%s\n", header_line(columns).c_str());
  std::vector<Row> rows;
  std::vector<std::string> notes;
  for (const Shape& s : shapes) {
    const Inputs in = draw(s);
    const std::size_t first = rows.size();
    for (const Storage st : storages) rows.push_back(measure(s, in, st, setup));
    if (a.paged > 0 && s.kind == "decode")
      for (std::size_t i = first; i < rows.size(); ++i)
        if (rows[i].error.empty()) measure_paged(s, in, rows[i].st, setup, a.paged, rows[i]);
    // The f32 row of this shape, the float32 baseline, then the peers, each after sdpa's rows.
    double f32_ms = 0;
    for (std::size_t i = first; i < rows.size(); ++i)
      if (rows[i].st == Storage::f32 && rows[i].error.empty()) f32_ms = rows[i].ms;
    const double blas_ms = baseline ? measure_blas(s, in, setup) : 0;
    for (std::size_t i = first; i < rows.size(); ++i) {
      Row& r = rows[i];
      if (!r.error.empty()) {
        const std::string note = fmt::format("{} rows not run: {}", storage_name(r.st), r.error);
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
        continue;
      }
      if (f32_ms > 0) r.vs_f32 = f32_ms / r.ms;
      if (blas_ms > 0) {
        r.blas_ms = blas_ms;
        r.speedup = blas_ms / r.ms;
      }
      // A peer's time on this row and its ratio to sdpa's, or a note (once) saying why not.
      auto time_peer = [&](const Peer& peer, const char* name, const std::string& args, double& ms, double& vs) {
        std::string why;
        const double m = peer.run(args, why);
        if (m > 0) {
          ms = m;
          vs = m / r.ms;
          return;
        }
        const std::string note = fmt::format("{} not timed on {} {} rows: {}", name, s.kind, storage_name(r.st), why);
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
      };
      // torch and onnxruntime hold Q, K, V in the row's dtype; neither has int8 K/V.
      const std::string py_args =
          fmt::format("--pass forward --dtype {} {}", storage_name(r.st), peer_shape_args(s, t, a.repeats));
      if (torch && r.st != Storage::i8) time_peer(*torch, "PyTorch", "torch " + py_args, r.peer_ms, r.vs_peer);
      if (ort && r.st != Storage::i8) time_peer(*ort, "onnxruntime", "onnxruntime " + py_args, r.ort_ms, r.vs_ort);
      if (ggml && s.kind == "decode")
        time_peer(*ggml, "ggml", fmt::format("--type {} {}", ggml_type(r.st), peer_shape_args(s, t, a.repeats)),
                  r.ggml_ms, r.vs_ggml);
    }
    for (std::size_t i = first; i < rows.size(); ++i) std::printf("%s\n", row_line(rows[i], columns).c_str());
    std::fflush(stdout);
  }
  if (!notes.empty()) std::printf("\n");
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());

#if SDPA_HAVE_JSON
  if (!a.json.empty()) {
    // ordered_json keeps the keys in the order written here.
    nlohmann::ordered_json js;
    js["threads"] = t;
    js["isa"] = isa_name(isa);
    js["fma_peak_gflops"] = peak_gflops;
    js["read_bw_gbs"] = read_bw_gbs;
    nlohmann::ordered_json& dt = js["dtypes"] = nlohmann::ordered_json::array();
    for (const Storage st : storages) dt.push_back(storage_name(st));
    if (std::find(storages.begin(), storages.end(), Storage::i8) != storages.end())
      js["i8_scales"] = {{"dtype", "float16"}, {"group", kI8Group}};
    js["round_p"] = a.round_p;
    js["peers"] = {{"torch", torch_kernel}, {"onnxruntime", ort_kernel}, {"ggml", ggml_kernel}};
    nlohmann::ordered_json& out = js["shapes"] = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json x;
      x["kind"] = r.s.kind;
      x.update(shape_json(r.s));
      x["dtype"] = storage_name(r.st);
      if (!r.error.empty()) {
        x["error"] = r.error;
        out.push_back(std::move(x));
        continue;
      }
      x["ms"] = r.ms;
      x["gflops"] = r.gflops;
      x["pct_peak"] = r.pct_peak;
      x["kv_gbs"] = r.gbs;
      x["pct_bw"] = r.pct_bw;
      if (r.vs_f32 > 0) x["vs_f32"] = r.vs_f32;
      if (r.blas_ms > 0) {
        x["blas_ms"] = r.blas_ms;
        x["speedup"] = r.speedup;
      }
      if (r.peer_ms > 0) {
        x["torch_ms"] = r.peer_ms;
        x["vs_torch"] = r.vs_peer;
      }
      if (r.ort_ms > 0) {
        x["ort_ms"] = r.ort_ms;
        x["vs_ort"] = r.vs_ort;
      }
      if (r.ggml_ms > 0) {
        x["ggml_ms"] = r.ggml_ms;
        x["vs_ggml"] = r.vs_ggml;
      }
      if (r.paged_ms > 0) {
        x["paged_ms"] = r.paged_ms;
        x["paged_vs_contiguous"] = r.vs_contiguous;
      }
      x["io_mib"] = r.io_mib;
      x["extra_mib"] = r.extra_mib;
      out.push_back(std::move(x));
    }
    write_json(a.json, js);
  }
#endif
  return kExitOk;
}

const Registrar reg{{"bench", "Benchmark sdpa against the measured FMA peak, DRAM bandwidth and an OpenBLAS baseline",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto a = std::make_shared<BenchArgs>();
                       auto no_baseline = std::make_shared<bool>(false);
                       sub.add_option("--shapes", a->which, "all, prefill or decode")->capture_default_str();
                       sub.add_option("--n", a->ns,
                                      "prefill sequence lengths N (Nq = Nkv); default 512 1024 2048 4096 8192, "
                                      "1024 4096 with --backward");
                       sub.add_option("--nkv", a->nkvs,
                                      "decode cache lengths Nkv (Nq = 1, GQA H=32/Hkv=8 and MHA H=Hkv=32, d=128); "
                                      "default 1024 4096 16384");
                       sub.add_option("--dtype", a->dtypes,
                                      "storages timed side by side, repeatable or a comma list: f32, f16, bf16, i8 "
                                      "(int8 K/V, float16 scales per 32 values)")
                           ->delimiter(',')
                           ->capture_default_str();
                       sub.add_flag("--round-p", a->round_p,
                                    "round P to 16 bits before P·V with f16/bf16 V (Options::round_p)");
                       sub.add_flag("--backward", a->backward,
                                    "time the backward pass (dQ, dK, dV) against PyTorch's CPU backward");
                       sub.add_option("--python", a->python,
                                      "the Python whose torch is the peer (f32, f16, bf16 rows) when given, and of "
                                      "--backward always; with --peers, whose torch and onnxruntime (default: "
                                      "$SDPA_PEER_PYTHON, .venv/bin/python3, python3)")
                           ->type_name("PATH");
                       sub.add_flag("--peers", a->peers,
                                    "time PyTorch's SDPA and onnxruntime's Attention-23 beside sdpa (prefill and "
                                    "decode rows), each skipped with a message when not importable");
                       sub.add_option("--ggml", a->ggml,
                                      "the ggml_flash_attn program (built with -DSDPA_GGML_DIR): ggml's "
                                      "flash_attn_ext as the peer of the decode rows")
                           ->type_name("PATH");
                       sub.add_option("--paged", a->paged,
                                      "also time each decode row over a paged cache of this page size (pages in "
                                      "shuffled order), alternately with the contiguous call: columns paged ms and "
                                      "vs contig (paged time over contiguous)")
                           ->type_name("PAGE");
                       sub.add_option("--threads", a->threads, "threads (0 = all hardware threads)")
                           ->capture_default_str();
                       sub.add_option("--repeats", a->repeats, "timed repeats per shape (the median is reported)")
                           ->capture_default_str();
                       sub.add_flag("--no-baseline", *no_baseline, "skip the OpenBLAS baseline");
                       sub.add_option("--isa", a->isa, "Kernel instruction set: " + isa_choices())
                           ->capture_default_str();
                       sub.add_option("--json", a->json, "also write the results as JSON to this file")
                           ->type_name("PATH")
                           ->check(file_name());
                       return [=] {
                         BenchArgs args = *a;
                         args.baseline = !*no_baseline;
                         return run_bench(std::move(args));
                       };
                     },
                     60}};

}  // namespace
}  // namespace sdpa::cli
