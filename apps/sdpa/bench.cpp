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
// --backward times the backward pass instead (dQ, dK, dV from the forward's O
// and lse, which are computed once, untimed): FLOPs = 10·B·H·Nq·Nkv·d (the five
// products QKᵀ, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K), halved for causal. Its peer is
// PyTorch's CPU backward of scaled_dot_product_attention, timed in the same
// run, shape by shape, by scripts/peer_bench.py (carried in the binary) under
// the Python of --python, when torch is importable there.
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <fstream>
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

struct Row {
  Shape s;
  double ms = 0, gflops = 0, pct_peak = 0, gbs = 0, pct_bw = 0;
  double blas_ms = 0, speedup = 0;
  double peer_ms = 0, vs_peer = 0;  // --backward: PyTorch's time and its ratio to sdpa's (0: not run)
  double io_mib = 0, extra_mib = 0;
};

// scripts/peer_bench.py run under a chosen Python: written to a temporary
// file once, then one process per shape.
class PythonPeer {
 public:
  explicit PythonPeer(std::string python) : python_(std::move(python)) {
    std::string dir = std::filesystem::temp_directory_path().string();
    std::string templ = dir + "/sdpa-peer-XXXXXX.py";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const int fd = mkstemps(buf.data(), 3);
    if (fd < 0) return;
    const std::string text = kPeerBenchPy;
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (ok) script_ = buf.data();
  }
  ~PythonPeer() {
    if (!script_.empty()) ::unlink(script_.c_str());
  }
  PythonPeer(const PythonPeer&) = delete;
  PythonPeer& operator=(const PythonPeer&) = delete;

  // The median time in ms, or a negative value with `why` set.
  double run(const std::string& args, std::string& why) const {
    if (script_.empty()) {
      why = "could not write the peer script to the temporary directory";
      return -1;
    }
    const std::string cmd = quote(python_) + " " + quote(script_) + " " + args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) {
      why = "could not start " + python_;
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
  const std::string& python() const { return python_; }
  mutable std::string kernel;  // what the peer reported it ran

 private:
  static std::string quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
  }
  std::string python_, script_;
};

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

template <class F>
double time_ms(int repeats, F&& f) {
  f();  // warm-up: page faults, thread start-up, caches
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_s();
    f();
    t.push_back((now_s() - t0) * 1e3);
  }
  return median(t);
}

std::vector<Shape> default_shapes(const std::string& which, const std::vector<std::int64_t>& ns) {
  std::vector<Shape> out;
  if (which == "all" || which == "prefill")
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (std::int64_t n : ns) out.push_back({"prefill", 1, 8, 8, n, n, d, causal});
  if (which == "all" || which == "decode")
    for (std::int64_t n : {1024, 4096, 16384}) out.push_back({"decode", 1, 32, 8, 1, n, 128, false});
  return out;
}

Row measure(const Shape& s, const Isa isa, int threads, int repeats, bool baseline, double peak, double bw) {
  Row row;
  row.s = s;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> q(s.b * s.h * s.n_q * s.d), k(s.b * s.h_kv * s.n_kv * s.d), v(k.size()),
      o(s.b * s.h * s.n_q * s.d);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  row.io_mib = (q.size() + k.size() + v.size() + o.size()) * 4.0 / (1 << 20);
  Options opt;
  opt.causal = s.causal;
  opt.threads = threads;
  opt.isa = isa;
  const TensorView qv = TensorView::contiguous(q.data(), {s.b, s.h, s.n_q, s.d});
  const TensorView kv = TensorView::contiguous(k.data(), {s.b, s.h_kv, s.n_kv, s.d});
  const TensorView vv = TensorView::contiguous(v.data(), {s.b, s.h_kv, s.n_kv, s.d});
  const TensorView ov = TensorView::contiguous(o.data(), {s.b, s.h, s.n_q, s.d});
  reset_peak_rss();
  const double rss0 = proc_status_mib("VmRSS:");
  row.ms = time_ms(repeats, [&] { attention(qv, kv, vv, ov, opt); });
  row.extra_mib = std::max(0.0, proc_status_mib("VmHWM:") - rss0);

  double flop = 4.0 * s.b * s.h * s.n_q * s.n_kv * s.d;
  if (s.causal && s.n_q == s.n_kv) flop /= 2;
  row.gflops = flop / row.ms / 1e6;
  row.pct_peak = sdpa::bench::percent_of_peak(row.gflops, peak);
  const double kv_bytes = 2.0 * s.b * s.h_kv * s.n_kv * s.d * 4;
  row.gbs = kv_bytes / row.ms / 1e6;
  row.pct_bw = 100 * row.gbs / bw;
#if SDPA_HAVE_BLAS_BASELINE
  if (baseline) {
    std::vector<float> scratch, ob(o.size());
    row.blas_ms = time_ms(repeats, [&] {
      sdpa::bench::blas_attention(q.data(), k.data(), v.data(), ob.data(), s.b, s.h, s.h_kv, s.n_q, s.n_kv, s.d, s.d,
                                  static_cast<float>(1 / std::sqrt(double(s.d))), s.causal, threads, scratch);
    });
    row.speedup = row.blas_ms / row.ms;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
#else
  (void)baseline;
#endif
  return row;
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

Row measure_backward(const Shape& s, const Isa isa, int threads, int repeats, double peak, const PythonPeer* peer) {
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
    const double ms = peer->run(fmt::format("torch --pass backward --b {} --h {} --hkv {} --nq {} --nkv {} --d {}{} "
                                            "--threads {} --repeats {}",
                                            s.b, s.h, s.h_kv, s.n_q, s.n_kv, s.d, s.causal ? " --causal" : "", threads,
                                            repeats),
                                why);
    if (ms > 0) {
      row.peer_ms = ms;
      row.vs_peer = ms / row.ms;
    }
  }
  return row;
}

int run_backward_bench(const std::vector<Shape>& shapes, Isa isa, int t, int repeats, const std::string& python,
                       const std::string& json_path) {
  std::printf("machine: %u hardware threads; measuring the backward pass with %d thread%s, isa %s (kernels %s)\n",
              std::thread::hardware_concurrency(), t, t == 1 ? "" : "s", isa_name(isa), cpu::kernels_for(isa).name);
  const double peak_gflops = sdpa::bench::fma_peak_gflops(isa, t);
  std::printf("FMA peak (float32, %d-lane FMA chains, %d threads): %.1f GFLOP/s\n", sdpa::bench::fma_lanes(isa), t,
              peak_gflops);
  // The peer: probed once on a tiny shape; the bench goes on without it.
  PythonPeer peer(python);
  std::string why;
  const bool have_peer = peer.run("torch --pass backward --b 1 --h 1 --hkv 1 --nq 8 --nkv 8 --d 8 --repeats 1", why) > 0;
  if (have_peer)
    std::printf("peer: %s (under %s)\n\n", peer.kernel.c_str(), python.c_str());
  else
    std::printf("peer: PyTorch not timed: %s under %s (pip install torch in a virtual environment, then --python "
                "PATH/bin/python3)\n\n",
                why.c_str(), python.c_str());
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

int run_bench(const std::string& which, std::vector<std::int64_t> ns, int threads, int repeats, bool baseline,
              const std::string& isa_flag, const std::string& json_path, bool backward, std::string python) {
  if (ns.empty()) ns = backward ? std::vector<std::int64_t>{1024, 4096} : std::vector<std::int64_t>{512, 1024, 2048, 4096, 8192};
  if (backward && which == "decode") throw UsageError("--shapes: --backward times prefill shapes (all or prefill), got 'decode'");
  if (threads < 0) throw UsageError("--threads: expected >= 0, got " + std::to_string(threads));
  if (repeats < 1) throw UsageError("--repeats: expected >= 1, got " + std::to_string(repeats));
  if (which != "all" && which != "prefill" && which != "decode")
    throw UsageError("--shapes: expected all, prefill or decode, got '" + which + "'");
  Isa isa;
  try {
    isa = parse_isa(isa_flag);
  } catch (const Error& e) {
    throw cli_error(e);
  }
  isa = resolve_isa(isa);
#if !SDPA_HAVE_JSON
  if (!json_path.empty())
    throw UsageError("--json: this sdpa was built without nlohmann-json; apt-get install nlohmann-json3-dev, then "
                     "re-run cmake and rebuild");
#endif
#if !SDPA_HAVE_BLAS_BASELINE
  if (baseline)
    std::printf("baseline: the OpenBLAS baseline was not built; apt-get install libopenblas-dev, then re-run cmake and "
                "rebuild\n");
  baseline = false;
#endif
  // The sizes --n implies, checked before any work: Q, K, V, O of the
  // largest prefill shape (and the baseline's Nq x Nkv scores).
  for (const std::int64_t n : ns)
    if (n < 1) throw UsageError(fmt::format("--n: expected sequence lengths >= 1, got {}", n));
  for (const Shape& s : default_shapes(which, ns)) {
    const std::uint64_t q = mul_sat(mul_sat(mul_sat(s.b, s.h), s.n_q), s.d),
                        kv = mul_sat(mul_sat(mul_sat(s.b, s.h_kv), s.n_kv), s.d);
    std::uint64_t bytes = mul_sat(add_sat(mul_sat(2, q), mul_sat(2, kv)), sizeof(float));
    if (baseline) bytes = add_sat(bytes, mul_sat(mul_sat(s.n_q, s.n_kv), sizeof(float)));
    check_fits_memory("--n", std::to_string(s.n_q), bytes,
                      baseline ? "Q, K, V, O and the baseline's scores" : "Q, K, V and O");
  }
  if (!json_path.empty()) check_destination("--json", json_path);
  const int t = sdpa::bench::resolve_threads(threads);
  std::sort(ns.begin(), ns.end());
  if (backward) {
    if (python.empty()) python = default_python();
    return run_backward_bench(default_shapes("prefill", ns), isa, t, repeats, python, json_path);
  }

  std::printf("machine: %u hardware threads; measuring with %d thread%s, isa %s (kernels %s)\n",
              std::thread::hardware_concurrency(), t, t == 1 ? "" : "s", isa_name(isa), cpu::kernels_for(isa).name);
  const int lanes = sdpa::bench::fma_lanes(isa);
  const double peak_gflops = sdpa::bench::fma_peak_gflops(isa, t);
  const double read_bw_gbs = sdpa::bench::measure_read_bandwidth_gbs(t);
  std::printf("FMA peak (float32, %d-lane FMA chains, %d threads): %.1f GFLOP/s    DRAM read bandwidth: %.1f GB/s\n\n",
              lanes, t, peak_gflops, read_bw_gbs);

  std::printf("%-8s %3s %3s %4s %6s %6s %4s %-6s %9s %8s %7s %8s %6s %9s %8s %9s %9s\n", "shape", "B", "H", "Hkv", "Nq",
              "Nkv", "d", "causal", "ms", "GFLOP/s", "%peak", "GB/s", "%bw", "blas ms", "speedup", "io MiB", "extra MiB");
  std::vector<Row> rows;
  for (const Shape& s : default_shapes(which, ns)) {
    const Row r = measure(s, isa, t, repeats, baseline, peak_gflops, read_bw_gbs);
    rows.push_back(r);
    const bool dec = s.kind == "decode";
    std::printf("%-8s %3lld %3lld %4lld %6lld %6lld %4lld %-6s %9.2f %8.1f %6.1f%% %8s %6s %9s %8s %9.1f %9.1f\n",
                s.kind.c_str(), (long long)s.b, (long long)s.h, (long long)s.h_kv, (long long)s.n_q,
                (long long)s.n_kv, (long long)s.d, s.causal ? "yes" : "no", r.ms, r.gflops, r.pct_peak,
                dec ? fmt::format("{:.1f}", r.gbs).c_str() : "-", dec ? fmt::format("{:.1f}%", r.pct_bw).c_str() : "-",
                baseline ? fmt::format("{:.2f}", r.blas_ms).c_str() : "-",
                baseline ? fmt::format("{:.2f}x", r.speedup).c_str() : "-", r.io_mib, r.extra_mib);
    std::fflush(stdout);
  }

#if SDPA_HAVE_JSON
  if (!json_path.empty()) {
    // ordered_json keeps the keys in the order written here.
    nlohmann::ordered_json js;
    js["threads"] = t;
    js["isa"] = isa_name(isa);
    js["fma_peak_gflops"] = peak_gflops;
    js["read_bw_gbs"] = read_bw_gbs;
    nlohmann::ordered_json& shapes = js["shapes"] = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json x;
      x["kind"] = r.s.kind;
      x.update(shape_json(r.s));
      x["ms"] = r.ms;
      x["gflops"] = r.gflops;
      x["pct_peak"] = r.pct_peak;
      x["kv_gbs"] = r.gbs;
      x["pct_bw"] = r.pct_bw;
      if (baseline) {
        x["blas_ms"] = r.blas_ms;
        x["speedup"] = r.speedup;
      }
      x["io_mib"] = r.io_mib;
      x["extra_mib"] = r.extra_mib;
      shapes.push_back(std::move(x));
    }
    write_json(json_path, js);
  }
#endif
  return kExitOk;
}

const Registrar reg{{"bench", "Benchmark sdpa against the measured FMA peak, DRAM bandwidth and an OpenBLAS baseline",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto which = std::make_shared<std::string>("all");
                       auto ns = std::make_shared<std::vector<std::int64_t>>();
                       auto backward = std::make_shared<bool>(false);
                       auto python = std::make_shared<std::string>();
                       auto threads = std::make_shared<int>(0);
                       auto repeats = std::make_shared<int>(3);
                       auto no_baseline = std::make_shared<bool>(false);
                       auto isa = std::make_shared<std::string>("auto");
                       auto json = std::make_shared<std::string>();
                       sub.add_option("--shapes", *which, "all, prefill or decode")->capture_default_str();
                       sub.add_option("--n", *ns,
                                      "prefill sequence lengths N (Nq = Nkv); default 512 1024 2048 4096 8192, "
                                      "1024 4096 with --backward");
                       sub.add_flag("--backward", *backward,
                                    "time the backward pass (dQ, dK, dV) against PyTorch's CPU backward");
                       sub.add_option("--python", *python,
                                      "the Python whose torch is the --backward peer (default: $SDPA_PEER_PYTHON, "
                                      ".venv/bin/python3, python3)")
                           ->type_name("PATH");
                       sub.add_option("--threads", *threads, "threads (0 = all hardware threads)")
                           ->capture_default_str();
                       sub.add_option("--repeats", *repeats, "timed repeats per shape (the median is reported)")
                           ->capture_default_str();
                       sub.add_flag("--no-baseline", *no_baseline, "skip the OpenBLAS baseline");
                       sub.add_option("--isa", *isa, "Kernel instruction set: " + isa_choices())->capture_default_str();
                       sub.add_option("--json", *json, "also write the results as JSON to this file")
                           ->type_name("PATH")
                           ->check(file_name());
                       return [=] {
                         return run_bench(*which, *ns, *threads, *repeats, !*no_baseline, *isa, *json, *backward,
                                          *python);
                       };
                     },
                     60}};

}  // namespace
}  // namespace sdpa::cli
