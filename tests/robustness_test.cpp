// Extreme values the API accepts, memory that cannot be had, and files that
// are not what they seem: the library reports sdpa::Error (never aborts or
// overflows), the CLI exits 2 for usage errors and 1 for failures, naming the
// flag, and never replaces an input with an output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/threads.h"
#include "io/npy.h"
#include "sdpa/attention.h"
#include "support/problem.h"
#include "sdpa/error.h"
#include "sdpa/onnx.h"
#include "sdpa/serving.h"
#include "sdpa/tensor_view.h"

namespace {

namespace fs = std::filesystem;
using sdpa::DType;
using sdpa::Error;
using sdpa::Isa;
using sdpa::Options;
using sdpa::TensorView;
using ::testing::HasSubstr;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

using sdpa::test::randn;

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : sdpa::compiled_isas())
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

// One small call [B=2, H=2, Nq=5, d=8] x [Nkv=7], run on the fast path (every
// ISA) and through the float64 oracle.
struct Small {
  static constexpr std::int64_t b = 2, h = 2, nq = 5, nkv = 7, d = 8;
  std::vector<float> q = randn(b * h * nq * d, 1), k = randn(b * h * nkv * d, 2), v = randn(b * h * nkv * d, 3);
  std::vector<float> slopes = {0.5f, 0.25f};

  struct Out {
    std::vector<double> o, lse;
  };
  Out fast(Options opt, Isa isa) const {
    std::vector<float> o(q.size()), lse(b * h * nq);
    opt.isa = isa;
    opt.threads = 2;
    opt.lse = TensorView::contiguous(lse.data(), {b, h, nq});
    sdpa::attention(TensorView::contiguous(q.data(), {b, h, nq, d}), TensorView::contiguous(k.data(), {b, h, nkv, d}),
                    TensorView::contiguous(v.data(), {b, h, nkv, d}), TensorView::contiguous(o.data(), {b, h, nq, d}),
                    opt);
    return {{o.begin(), o.end()}, {lse.begin(), lse.end()}};
  }
  Out reference(Options opt) const {
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), o(q.size()),
        lse(b * h * nq);
    opt.lse = TensorView::contiguous(lse.data(), DType::f64, {b, h, nq});
    sdpa::reference_attention(TensorView::contiguous(qd.data(), DType::f64, {b, h, nq, d}),
                              TensorView::contiguous(kd.data(), DType::f64, {b, h, nkv, d}),
                              TensorView::contiguous(vd.data(), DType::f64, {b, h, nkv, d}),
                              TensorView::contiguous(o.data(), DType::f64, {b, h, nq, d}), opt);
    return {o, lse};
  }
};

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // equal infinities
    ASSERT_NEAR(a[i], b[i], tol * std::max(1.0, std::fabs(b[i]))) << what << " at " << i;
  }
}

// ---------------------------------------------------------------------------
// Windows and offsets at the ends of int64

TEST(extreme_windows, HugeWindowsMeanUnbounded) {
  const Small s;
  for (Isa isa : runnable_isas()) {
    for (bool causal : {false, true}) {
      Options plain;
      plain.causal = causal;
      const Small::Out want = s.fast(plain, isa);
      for (auto [left, right] : {std::pair{kMax, std::int64_t{-1}}, std::pair{std::int64_t{-1}, kMax},
                                 std::pair{kMax, kMax}, std::pair{kMax - 1, kMax - 1}}) {
        Options opt = plain;
        opt.window_left = left;
        opt.window_right = right;
        const std::string what = std::string(isa_name(isa)) + (causal ? " causal" : "") + " window " +
                                 std::to_string(left) + "/" + std::to_string(right);
        const Small::Out got = s.fast(opt, isa);
        expect_close(got.o, want.o, 0, what);
        expect_close(got.lse, want.lse, 0, what);
        for (double x : got.lse) EXPECT_TRUE(std::isfinite(x)) << what;
        const Small::Out ref = s.reference(opt);
        expect_close(got.o, ref.o, 1e-5, what + " vs reference");
        expect_close(got.lse, ref.lse, 1e-5, what + " vs reference");
      }
    }
  }
}

TEST(extreme_windows, ExtremeOffsetsMatchTheOracle) {
  const Small s;
  for (Isa isa : runnable_isas()) {
    for (std::int64_t off : {kMax, kMin, kMax - 3, kMin + 2}) {
      for (bool alibi : {false, true}) {
        for (auto [causal, left, right] :
             {std::tuple{false, std::int64_t{-1}, std::int64_t{-1}}, std::tuple{true, std::int64_t{-1}, std::int64_t{-1}},
              std::tuple{false, kMax, kMax}, std::tuple{true, kMax, std::int64_t{2}},
              std::tuple{false, std::int64_t{3}, kMax}, std::tuple{false, std::int64_t{0}, std::int64_t{0}}}) {
          std::vector<std::int64_t> offsets = {off, off};
          Options opt;
          opt.causal = causal;
          opt.window_left = left;
          opt.window_right = right;
          opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i64, {Small::b});
          if (alibi) opt.alibi_slopes = TensorView::contiguous(s.slopes.data(), {Small::h});
          const std::string what = std::string(isa_name(isa)) + " offset " + std::to_string(off) +
                                   (alibi ? " alibi" : "") + (causal ? " causal" : "") + " window " +
                                   std::to_string(left) + "/" + std::to_string(right);
          const Small::Out got = s.fast(opt, isa), ref = s.reference(opt);
          expect_close(got.o, ref.o, 1e-5, what);
          expect_close(got.lse, ref.lse, 1e-5, what);  // relative: |lse| ~ slope·2^63 with ALiBi
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Working memory

TEST(working_memory, NoKeysNeedNoWorkspace) {
  // V of dv = 2^25 and no keys: every row is empty, whatever dv is.
  const std::int64_t dv = std::int64_t{1} << 25;
  std::vector<float> q(8, 1.0f), o(static_cast<std::size_t>(dv), 7.0f);
  float lse = 0;
  Options opt;
  opt.lse = TensorView::contiguous(&lse, {1, 1, 1});
  ASSERT_NO_THROW(sdpa::attention(TensorView::contiguous(q.data(), {1, 1, 1, 8}),
                                  TensorView::contiguous(static_cast<const float*>(nullptr), {1, 1, 0, 8}),
                                  TensorView::contiguous(static_cast<const float*>(nullptr), {1, 1, 0, dv}),
                                  TensorView::contiguous(o.data(), {1, 1, 1, dv}), opt));
  for (float x : o) ASSERT_EQ(x, 0.0f);
  EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
}

TEST(working_memory, TooMuchIsAnErrorNamingO) {
  const std::int64_t dv = std::int64_t{1} << 22;  // 2^22 floats per row of the accumulator and the V tile
  std::vector<float> q(8, 1.0f), k(8, 1.0f), v(static_cast<std::size_t>(dv), 1.0f), o(v.size());
  for (Isa isa : runnable_isas()) {
    Options opt;
    opt.isa = isa;
    try {
      sdpa::attention(TensorView::contiguous(q.data(), {1, 1, 1, 8}), TensorView::contiguous(k.data(), {1, 1, 1, 8}),
                      TensorView::contiguous(v.data(), {1, 1, 1, dv}), TensorView::contiguous(o.data(), {1, 1, 1, dv}),
                      opt);
      ADD_FAILURE() << isa_name(isa) << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.arg(), "o") << e.what();
      EXPECT_THAT(e.got(), HasSubstr("dv=4194304")) << e.what();
    }
  }
}

TEST(working_memory, AnItemThatThrowsIsRethrownOnTheCaller) {
  for (int threads : {1, 2, 4}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(sdpa::cpu::parallel_for(1000, threads,
                                         [&](std::int64_t i, int) {
                                           ++ran;
                                           if (i == 3) throw std::runtime_error("item 3");
                                           // Items take a while, so the other workers cannot finish
                                           // all 1000 before they see the stop (on a loaded machine too).
                                           std::this_thread::sleep_for(std::chrono::microseconds(200));
                                         }),
                 std::runtime_error);
    EXPECT_LT(ran.load(), 1000);
    // The pool still works afterwards.
    std::atomic<int> sum{0};
    sdpa::cpu::parallel_for(100, threads, [&](std::int64_t, int) { ++sum; });
    EXPECT_EQ(sum.load(), 100);
  }
}

// ---------------------------------------------------------------------------
// Packed sequences

TEST(packed_checks, AnEmptyCuSeqlensQIsReportedAsItself) {
  std::vector<float> q(3 * 8), k(3 * 8), v(3 * 8), o(3 * 8);
  std::vector<std::int32_t> cu_k = {0, 3};
  try {
    sdpa::attention_varlen(TensorView::contiguous(q.data(), {3, 1, 8}), TensorView::contiguous(k.data(), {3, 1, 8}),
                           TensorView::contiguous(v.data(), {3, 1, 8}), TensorView::contiguous(o.data(), {3, 1, 8}),
                           TensorView::contiguous(nullptr, DType::i32, {0}),
                           TensorView::contiguous(cu_k.data(), DType::i32, {2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.arg(), "cu_seqlens_q") << e.what();
  }
}

// ---------------------------------------------------------------------------
// ONNX

TEST(onnx_extremes, EmptyBatchWithAPast) {
  sdpa::onnx::AttentionInputs in;
  in.Q = TensorView::contiguous(static_cast<const float*>(nullptr), {0, 1, 1, 8});
  in.K = TensorView::contiguous(static_cast<const float*>(nullptr), {0, 1, 1, 8});
  in.V = TensorView::contiguous(static_cast<const float*>(nullptr), {0, 1, 1, 8});
  in.past_key = TensorView::contiguous(static_cast<const float*>(nullptr), {0, 1, 2, 8});
  in.past_value = TensorView::contiguous(static_cast<const float*>(nullptr), {0, 1, 2, 8});
  sdpa::onnx::AttentionOutputs out;
  out.want_present_key = out.want_present_value = true;
  ASSERT_NO_THROW(sdpa::onnx::attention(in, {}, out));
  EXPECT_EQ(out.present_key.shape, (std::vector<std::int64_t>{0, 1, 3, 8}));
  EXPECT_EQ(out.Y.shape, (std::vector<std::int64_t>{0, 1, 1, 8}));
}

TEST(onnx_extremes, HugeRightWindowIsUnbounded) {
  std::vector<float> q = randn(2 * 3 * 8, 4), k = randn(2 * 6 * 8, 5), v = randn(2 * 6 * 8, 6);
  sdpa::onnx::AttentionInputs in;
  in.Q = TensorView::contiguous(q.data(), {1, 2, 3, 8});
  in.K = TensorView::contiguous(k.data(), {1, 2, 6, 8});
  in.V = TensorView::contiguous(v.data(), {1, 2, 6, 8});
  sdpa::onnx::AttentionAttributes plain;
  plain.opset = 25;
  sdpa::onnx::AttentionOutputs want, got;
  sdpa::onnx::attention(in, plain, want);
  sdpa::onnx::AttentionAttributes wide = plain;
  wide.right_window_size = kMax;
  wide.left_window_size = kMax;
  sdpa::onnx::attention(in, wide, got);
  EXPECT_EQ(got.Y.data, want.Y.data);
}

TEST(onnx_extremes, ExtremeNonpadLengthsAreRefusedWithoutOverflow) {
  std::vector<float> q(8), k(8), v(8);
  for (std::int64_t n : {kMin, kMax}) {
    std::vector<std::int64_t> np = {n};
    sdpa::onnx::AttentionInputs in;
    in.Q = TensorView::contiguous(q.data(), {1, 1, 1, 8});
    in.K = TensorView::contiguous(k.data(), {1, 1, 1, 8});
    in.V = TensorView::contiguous(v.data(), {1, 1, 1, 8});
    in.nonpad_kv_seqlen = TensorView::contiguous(np.data(), DType::i64, {1});
    sdpa::onnx::AttentionOutputs out;
    try {
      sdpa::onnx::attention(in, {}, out);
      ADD_FAILURE() << "no error for " << n;
    } catch (const Error& e) {
      EXPECT_EQ(e.arg(), "nonpad_kv_seqlen") << e.what();
    }
  }
}

// ---------------------------------------------------------------------------
// Files

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    dir_ = fs::temp_directory_path() / ("sdpa_robust_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  struct Result {
    int code = -1;
    std::string err;
  };
  Result cli(const std::vector<std::string>& args, const std::string& cwd = "") const {
    auto quote = [](const std::string& s) {
      std::string q = "'";
      for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      return q + "'";
    };
    std::string cmd = cwd.empty() ? "" : "cd " + quote(cwd) + " && ";
    cmd += "timeout 60 ";
    cmd += quote(SDPA_CLI);
    for (const std::string& a : args) {
      cmd += ' ';
      cmd += quote(a);
    }
    const std::string err = (dir_ / "stderr").string();
    cmd += " >/dev/null 2>" + quote(err) + " </dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err);
    r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return r;
  }
  std::string bytes(const std::string& p) const {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const std::string& p, const std::vector<std::int64_t>& shape, std::uint64_t seed) const {
    std::int64_t n = 1;
    for (std::int64_t x : shape) n *= x;
    const std::vector<float> f = randn(static_cast<std::size_t>(n), seed);
    sdpa::io::write_npy(p, DType::f32, shape, f.data());
  }
  void qkv() const {
    write(path("q.npy"), {2, 4, 8}, 1);
    write(path("k.npy"), {2, 6, 8}, 2);
    write(path("v.npy"), {2, 6, 8}, 3);
  }

  fs::path dir_;
};

using npy_files = TempDir;
using cli_robust = TempDir;

TEST_F(npy_files, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = path("pipe.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    sdpa::io::read_npy(fifo);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("FIFO"));
  }
}

TEST_F(cli_robust, AFifoInputFailsAtOnce) {
  qkv();
  const std::string fifo = path("pipe.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result r = cli({"run", "--q", fifo, "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--q"));
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(cli_robust, AnOutputOnAnInputIsAUsageError) {
  qkv();
  fs::create_symlink(path("k.npy"), path("k_link.npy"));
  fs::create_hard_link(path("v.npy"), path("v_hard.npy"));
  const std::string q0 = bytes(path("q.npy")), k0 = bytes(path("k.npy")), v0 = bytes(path("v.npy"));
  const std::vector<std::string> base = {"run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--out", "q.npy"}, "--out"},
      {{"--out", "./q.npy"}, "--out"},
      {{"--out", path("sub/../q.npy")}, "--out"},
      {{"--out", "k_link.npy"}, "--out"},
      {{"--out", "v_hard.npy"}, "--out"},
      {{"--out", "o.npy", "--lse", "k.npy"}, "--lse"},
      {{"--out", "o.npy", "--probs", "./v.npy"}, "--probs"},
  };
  fs::create_directories(path("sub"));
  for (const auto& [extra, flag] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = cli(args, dir_.string());
    EXPECT_EQ(r.code, 2) << extra[1] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag)) << extra[1];
    EXPECT_THAT(r.err, HasSubstr("input")) << extra[1];
  }
  EXPECT_EQ(bytes(path("q.npy")), q0);
  EXPECT_EQ(bytes(path("k.npy")), k0);
  EXPECT_EQ(bytes(path("v.npy")), v0);
  EXPECT_FALSE(fs::exists(path("o.npy")));

  // Packed: the prefix sums are inputs too.
  std::vector<std::int32_t> cu = {0, 4};
  sdpa::io::write_npy(path("cu.npy"), DType::i32, std::vector<std::int64_t>{2}, cu.data());
  const Result r = cli({"run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--cu-seqlens-q", "cu.npy",
                        "--cu-seqlens-k", "cu.npy", "--out", "./cu.npy"},
                       dir_.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--cu-seqlens-q"));
}

TEST_F(cli_robust, AnOnnxOutputOnAnInputIsAUsageError) {
  write(path("Q.npy"), {1, 2, 3, 8}, 1);
  write(path("K.npy"), {1, 2, 5, 8}, 2);
  write(path("V.npy"), {1, 2, 5, 8}, 3);
  write(path("PK.npy"), {1, 2, 1, 8}, 4);
  write(path("PV.npy"), {1, 2, 1, 8}, 5);
  const std::string q0 = bytes(path("Q.npy")), pk0 = bytes(path("PK.npy"));
  const std::vector<std::string> base = {"onnx", "--Q", "Q.npy", "--K", "K.npy", "--V", "V.npy",
                                         "--past-key", "PK.npy", "--past-value", "PV.npy"};
  for (const auto& extra : std::vector<std::vector<std::string>>{{"--Y", "Q.npy"},
                                                                 {"--Y", "./Q.npy"},
                                                                 {"--Y", "y.npy", "--present-key", "PK.npy"},
                                                                 {"--Y", "y.npy", "--present-value", "./K.npy"}}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = cli(args, dir_.string());
    EXPECT_EQ(r.code, 2) << extra.back() << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(extra[extra.size() - 2])) << r.err;
  }
  EXPECT_EQ(bytes(path("Q.npy")), q0);
  EXPECT_EQ(bytes(path("PK.npy")), pk0);
  EXPECT_FALSE(fs::exists(path("y.npy")));
}

TEST_F(cli_robust, AnEmptyFileNameIsAUsageError) {
  qkv();
  for (const auto& [flag, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"--out", {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out", ""}},
           {"--lse", {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                      path("o.npy"), "--lse", ""}},
           {"--q", {"run", "--q", "", "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy")}},
           {"--Y", {"onnx", "--Q", path("q.npy"), "--K", path("k.npy"), "--V", path("v.npy"), "--Y", ""}},
           {"--svg", {"stats", "--svg", ""}}}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("file name")) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(cli_robust, AHugeValueSizeWithNoKeysRuns) {
  // The 128-byte files of the report: V (0, 2^25), K (0, 8), Q (1, 8).
  const std::int64_t dv = std::int64_t{1} << 25;
  std::vector<float> q(8, 1.0f);
  sdpa::io::write_npy(path("q.npy"), DType::f32, std::vector<std::int64_t>{1, 8}, q.data());
  sdpa::io::write_npy(path("k.npy"), DType::f32, std::vector<std::int64_t>{0, 8}, nullptr);
  sdpa::io::write_npy(path("v.npy"), DType::f32, std::vector<std::int64_t>{0, dv}, nullptr);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                        path("o.npy"), "--lse", path("lse.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  const sdpa::io::NpyArray lse = sdpa::io::read_npy(path("lse.npy"));
  ASSERT_EQ(lse.numel(), 1);
  EXPECT_EQ(lse.as<float>()[0], -std::numeric_limits<float>::infinity());
  fs::remove(path("o.npy"));
}

TEST_F(cli_robust, AValueSizeThatNeedsTooMuchMemoryFailsNamingOut) {
  const std::int64_t dv = std::int64_t{1} << 22;
  write(path("q.npy"), {1, 8}, 1);
  write(path("k.npy"), {1, 8}, 2);
  write(path("v.npy"), {1, dv}, 3);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                        path("o.npy")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--out"));
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(cli_robust, AnOutputTooLargeToHoldFailsNamingItsFlag) {
  // O [1, 2^40] from Q (1, 8) and V (0, 2^40): 4 TiB, refused before it is allocated.
  std::vector<float> q(8, 1.0f);
  sdpa::io::write_npy(path("q.npy"), DType::f32, std::vector<std::int64_t>{1, 8}, q.data());
  sdpa::io::write_npy(path("k.npy"), DType::f32, std::vector<std::int64_t>{0, 8}, nullptr);
  sdpa::io::write_npy(path("v.npy"), DType::f32, std::vector<std::int64_t>{0, std::int64_t{1} << 40}, nullptr);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                        path("o.npy")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--out"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("bad_alloc")));
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

TEST_F(cli_robust, HugeWindowsAreUnbounded) {
  qkv();
  const std::vector<std::string> base = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy")};
  for (bool reference : {false, true}) {
    std::vector<std::string> a = base, b = base;
    a.insert(a.end(), {"--out", path("plain.npy")});
    b.insert(b.end(), {"--out", path("wide.npy"), "--window-right", "9223372036854775807", "--window-left",
                       "9223372036854775807"});
    if (reference) {
      a.push_back("--reference");
      b.push_back("--reference");
    }
    ASSERT_EQ(cli(a).code, 0);
    const Result r = cli(b);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(bytes(path("plain.npy")), bytes(path("wide.npy"))) << (reference ? "reference" : "fast");
  }
}

TEST_F(cli_robust, SizesTheFlagsImplyAreCheckedFirst) {
  for (const auto& [flag, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"--prompt", {"decode", "--prompt", "1000000000000"}},
           {"--prompt", {"decode", "--prompt", "9223372036854775807"}},
           {"--d", {"decode", "--d", "100000000"}},
           {"--batch", {"decode", "--batch", "100000000000", "--paged"}},
           {"--n", {"bench", "--n", "1000000000", "--no-baseline"}},
           {"--n", {"bench", "--n", "9223372036854775807"}},
           {"--n", {"bench", "--n", "0"}}}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << args[1] << " " << args[2] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("bad_alloc"))) << r.err;
  }
}

}  // namespace
