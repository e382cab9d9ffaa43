// End-to-end tests of the `sdpa` command line: the binary (SDPA_CLI) is run as
// a separate process and judged by its exit code, its output and the files it
// leaves behind. `run` results are checked against `run --reference` and
// against a plain double-precision attention computed here from the files, so
// that the layout and rank handling are checked independently of the library.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "support/cli_fixture.h"
#include "sdpa/attention.h"
#include "sdpa/tensor_view.h"

namespace {

namespace fs = std::filesystem;
using sdpa::DType;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------------------
// Running the binary

using sdpa::test::Result;
using sdpa::test::shell_quote;
using sdpa::test::slurp;

class CliTest : public sdpa::test::CliFixture {
 protected:
  CliTest() : CliFixture("sdpa_cli_test_") {}
};

// Suite names start with "cli" so that `ctest -R cli` selects exactly these tests.
using cli_explain = CliTest;
using cli_demo = CliTest;
using cli_help = CliTest;

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// ---------------------------------------------------------------------------
// Files

std::vector<std::int64_t> file_shape(const std::string& layout, int rank, std::int64_t b, std::int64_t h,
                                     std::int64_t n, std::int64_t c) {
  if (rank == 2) return {n, c};
  if (rank == 3) return layout == "bhsd" ? std::vector<std::int64_t>{h, n, c} : std::vector<std::int64_t>{n, h, c};
  return layout == "bhsd" ? std::vector<std::int64_t>{b, h, n, c} : std::vector<std::int64_t>{b, n, h, c};
}

// Offset of element (b, h, n, c) of a C-order file in `layout` (any rank: the
// dropped axes have size 1).
std::int64_t offset(const std::string& layout, std::int64_t hs, std::int64_t ns, std::int64_t cs, std::int64_t b,
                    std::int64_t h, std::int64_t n, std::int64_t c) {
  if (layout == "bhsd") return ((b * hs + h) * ns + n) * cs + c;
  return ((b * ns + n) * hs + h) * cs + c;
}

std::int64_t product(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t x : s) n *= x;
  return n;
}

// Writes N(0, 1) values (as float32 or float64) and returns them as double.
std::vector<double> write_random(const std::string& p, const std::vector<std::int64_t>& shape, bool f64,
                                 std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> f(static_cast<std::size_t>(product(shape)));
  for (float& x : f) x = normal(rng);
  std::vector<double> d(f.begin(), f.end());
  if (f64) {
    sdpa::io::write_npy(p, DType::f64, shape, d.data());
  } else {
    sdpa::io::write_npy(p, DType::f32, shape, f.data());
  }
  return d;
}

void write_f32(const std::string& p, const std::vector<std::int64_t>& shape, float value = 0.5f) {
  std::vector<float> f(static_cast<std::size_t>(product(shape)), value);
  sdpa::io::write_npy(p, DType::f32, shape, f.data());
}

// An output file read back as double, with its dtype and shape checked.
std::vector<double> read_values(const std::string& p, DType want, const std::vector<std::int64_t>& shape) {
  const sdpa::io::NpyArray a = sdpa::io::read_npy(p);
  EXPECT_EQ(a.dtype, want) << p;
  EXPECT_EQ(a.shape, shape) << p;
  std::vector<double> out(static_cast<std::size_t>(a.numel()));
  if (a.dtype == DType::f32) {
    std::copy(a.as<float>(), a.as<float>() + a.numel(), out.begin());
  } else if (a.dtype == DType::f64) {
    std::copy(a.as<double>(), a.as<double>() + a.numel(), out.begin());
  }
  return out;
}

// max |a - b|, counting equal infinities (lse of a query with no visible key) as exact.
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) continue;
    const double d = std::fabs(a[i] - b[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

// ---------------------------------------------------------------------------
// explain

TEST_F(cli_explain, Defaults) {
  const Result r = cli({"explain"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("40 / √64 = 40 / 8 = 5.00\n"));
  EXPECT_THAT(r.out, HasSubstr("standard deviation"));
  EXPECT_EQ(r.err, "");
}

TEST_F(cli_explain, CustomValues) {
  Result r = cli({"explain", "--score", "12", "--dk", "16"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("12 / √16 = 12 / 4 = 3.00\n"));

  // Non-integers get up to 4 decimals, the result 2.
  r = cli({"explain", "--score", "1.5", "--dk", "2"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("1.5 / √2 = 1.5 / 1.4142 = 1.06\n"));

  r = cli({"explain", "--score=-8", "--dk", "4"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("-8 / √4 = -8 / 2 = -4.00\n"));
}

TEST_F(cli_explain, BadValuesAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--dk", "0"},       {"--dk", "-3"},         {"--dk", "2.5"},  {"--dk", "abc"},
      {"--dk", ""},        {"--score", "nan"},     {"--score", "inf"}, {"--score", "1e999"},
      {"--score", "12x"},  {"--score", ""},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"explain"};
    args.insert(args.end(), c.begin(), c.end());
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << c[0] << " " << c[1] << "\n" << describe(r);
    EXPECT_THAT(r.err, HasSubstr(c[0])) << "the message names the flag";
  }
}

// ---------------------------------------------------------------------------
// demo

TEST_F(cli_demo, ShowsTheTablesAndMatchesTheOracle) {
  const Result r = cli({"demo"});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* s : {"Tom", "New York", "lives", "5.00", "1.50", "1.00", "ranking unchanged:  yes", "seed",
                        "1024", "ln 64", "ISA"}) {
    EXPECT_THAT(r.out, HasSubstr(s));
  }
  const std::string label = "float64 oracle: ";
  const auto at = r.out.find(label);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double diff = std::strtod(r.out.c_str() + at + label.size(), nullptr);
  EXPECT_GE(diff, 0.0);
  EXPECT_LT(diff, 1e-5);
}

// ---------------------------------------------------------------------------
// --help

// The --isa choices are the library's: every ISA compiled in, and no stale list.
TEST_F(cli_help, IsaChoicesComeFromTheLibrary) {
  std::string choices = "auto";
  for (const sdpa::Isa isa : sdpa::compiled_isas()) choices += std::string(", ") + sdpa::isa_name(isa);
  for (const char* sub : {"run", "decode"}) {
    const Result r = cli({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub << "\n" << describe(r);
    EXPECT_THAT(r.out, HasSubstr("Kernel instruction set: " + choices)) << sub;
  }
}

TEST_F(cli_help, EverySubcommandExitsZero) {
  for (const char* sub : {"explain", "demo", "run"}) {
    const Result r = cli({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub << "\n" << describe(r);
    EXPECT_THAT(r.out, HasSubstr("Usage")) << sub;
  }
  const Result r = cli({"--help"});
  EXPECT_EQ(r.code, 0) << describe(r);
  for (const char* sub : {"explain", "demo", "run"}) EXPECT_THAT(r.out, HasSubstr(sub));
}

// ---------------------------------------------------------------------------
// run: results

struct RunCase {
  std::string name;
  std::string layout;
  int rank;
  std::int64_t b, h, h_kv, n_q, n_kv, d, dv;
  bool causal = false;
  bool f64 = false;
  double scale = 0;                 // 0: the default 1/√d
  std::vector<std::string> extra;  // more flags for both runs
};

RunCase run_case(std::string name, std::string layout, int rank, std::int64_t b, std::int64_t h, std::int64_t h_kv,
                 std::int64_t n_q, std::int64_t n_kv, std::int64_t d, std::int64_t dv, bool causal = false,
                 bool f64 = false, double scale = 0, std::vector<std::string> extra = {}) {
  return RunCase{std::move(name), std::move(layout), rank, b, h, h_kv, n_q, n_kv, d, dv, causal, f64, scale,
                 std::move(extra)};
}

void PrintTo(const RunCase& c, std::ostream* os) { *os << c.name; }

class RunResults : public CliTest, public ::testing::WithParamInterface<RunCase> {};

TEST_P(RunResults, FastPathMatchesReferenceAndAPlainComputation) {
  const RunCase& c = GetParam();
  const auto q = write_random(path("q.npy"), file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.d), c.f64, 1);
  const auto k = write_random(path("k.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.d), c.f64, 2);
  const auto v = write_random(path("v.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.dv), c.f64, 3);

  std::vector<std::string> common = {"--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                     "--layout", c.layout};
  if (c.causal) common.push_back("--causal");
  if (c.scale > 0) {
    std::ostringstream s;
    s.precision(17);
    s << c.scale;
    common.insert(common.end(), {"--scale", s.str()});
  }
  common.insert(common.end(), c.extra.begin(), c.extra.end());

  std::vector<std::string> fast = {"run", "--out", path("o.npy"), "--lse", path("lse.npy"), "--probs",
                                   path("p.npy")};
  fast.insert(fast.end(), common.begin(), common.end());
  Result r = cli(fast);
  ASSERT_EQ(r.code, 0) << describe(r);
  std::vector<std::string> ref = {"run", "--reference", "--out", path("o_ref.npy"), "--lse", path("lse_ref.npy"),
                                  "--probs", path("p_ref.npy")};
  ref.insert(ref.end(), common.begin(), common.end());
  r = cli(ref);
  ASSERT_EQ(r.code, 0) << describe(r);

  const auto o_shape = file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.dv);
  std::vector<std::int64_t> lse_shape = {c.b, c.h, c.n_q}, p_shape = {c.b, c.h, c.n_q, c.n_kv};
  lse_shape.erase(lse_shape.begin(), lse_shape.begin() + (4 - c.rank));
  p_shape.erase(p_shape.begin(), p_shape.begin() + (4 - c.rank));
  const auto o = read_values(path("o.npy"), DType::f32, o_shape);
  const auto lse = read_values(path("lse.npy"), DType::f32, lse_shape);
  const auto p = read_values(path("p.npy"), DType::f32, p_shape);
  const auto o_ref = read_values(path("o_ref.npy"), DType::f64, o_shape);
  const auto lse_ref = read_values(path("lse_ref.npy"), DType::f64, lse_shape);
  const auto p_ref = read_values(path("p_ref.npy"), DType::f64, p_shape);
  EXPECT_LT(max_diff(o, o_ref), 1e-5);
  EXPECT_LT(max_diff(lse, lse_ref), 1e-5);
  EXPECT_LT(max_diff(p, p_ref), 1e-5);

  // The same attention written out plainly, reading the files by their layout.
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  std::vector<double> o_want(o_ref.size()), lse_want(lse_ref.size()), p_want(p_ref.size());
  for (std::int64_t b = 0; b < c.b; ++b) {
    for (std::int64_t h = 0; h < c.h; ++h) {
      const std::int64_t hk = h / (c.h / c.h_kv);
      for (std::int64_t i = 0; i < c.n_q; ++i) {
        const std::int64_t visible = c.causal ? std::clamp<std::int64_t>(i + c.n_kv - c.n_q + 1, 0, c.n_kv) : c.n_kv;
        const std::int64_t row = (b * c.h + h) * c.n_q + i;
        if (visible == 0) {
          lse_want[row] = -std::numeric_limits<double>::infinity();
          continue;  // O and P stay 0
        }
        std::vector<double> s(static_cast<std::size_t>(visible));
        for (std::int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < c.d; ++e) {
            dot += q[offset(c.layout, c.h, c.n_q, c.d, b, h, i, e)] * k[offset(c.layout, c.h_kv, c.n_kv, c.d, b, hk, j, e)];
          }
          s[j] = scale * dot;
        }
        const double m = *std::max_element(s.begin(), s.end());
        double l = 0;
        for (double& x : s) l += x = std::exp(x - m);
        lse_want[row] = m + std::log(l);
        for (std::int64_t j = 0; j < visible; ++j) p_want[row * c.n_kv + j] = s[j] / l;
        for (std::int64_t e = 0; e < c.dv; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < visible; ++j) acc += s[j] * v[offset(c.layout, c.h_kv, c.n_kv, c.dv, b, hk, j, e)];
          o_want[offset(c.layout, c.h, c.n_q, c.dv, b, h, i, e)] = acc / l;
        }
      }
    }
  }
  EXPECT_LT(max_diff(o_ref, o_want), 1e-9);
  EXPECT_LT(max_diff(lse_ref, lse_want), 1e-9);
  EXPECT_LT(max_diff(p_ref, p_want), 1e-9);
  EXPECT_THAT(tmp_leftovers(), ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(
    cli, RunResults,
    ::testing::Values(run_case("bhsd_4d", "bhsd", 4, 2, 4, 2, 37, 45, 16, 12),
                      run_case("bshd_4d_causal", "bshd", 4, 2, 4, 2, 37, 45, 16, 12, true),
                      run_case("bhsd_3d_causal", "bhsd", 3, 1, 3, 1, 50, 50, 32, 32, true),
                      run_case("bshd_3d", "bshd", 3, 1, 2, 2, 20, 33, 8, 5),
                      // Nq > Nkv: the first queries see no key (lse -inf, O and P zero).
                      run_case("bhsd_2d_causal_more_queries", "bhsd", 2, 1, 1, 1, 20, 12, 16, 16, true),
                      run_case("bshd_2d_one_query", "bshd", 2, 1, 1, 1, 1, 70, 64, 3),
                      run_case("bshd_4d_float64_inputs", "bshd", 4, 1, 4, 4, 19, 19, 24, 24, true, true),
                      run_case("bhsd_4d_scale_scalar_isa_threads", "bhsd", 4, 2, 2, 1, 9, 17, 8, 8, false, false, 0.3,
                              {"--isa", "scalar", "--threads", "3"})),
    [](const ::testing::TestParamInfo<RunCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// run: exit codes and messages

class RunErrors : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    write_f32(path("q.npy"), {2, 4, 6, 8});
    write_f32(path("k.npy"), {2, 2, 5, 8});
    write_f32(path("v.npy"), {2, 2, 5, 3});
  }
  std::vector<std::string> args(std::vector<std::string> more = {}) const {
    std::vector<std::string> a = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                  "--out", path("o.npy")};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  // An error: exit `code`, one line on stderr naming `names`, no output file.
  void expect_error(const std::vector<std::string>& a, const std::string& names, int code) const {
    const Result r = cli(a);
    EXPECT_EQ(r.code, code) << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(names));
    EXPECT_FALSE(fs::exists(path("o.npy")));
  }
  // A failure (exit 1): the run could not be done (a file that cannot be read).
  void expect_failure(const std::vector<std::string>& a, const std::string& names) const { expect_error(a, names, 1); }
  // A usage error (exit 2): an input file whose shape or type does not fit.
  void expect_usage_error(const std::vector<std::string>& a, const std::string& names) const {
    expect_error(a, names, 2);
  }
};

using cli_run = RunErrors;

TEST_F(cli_run, TheFixtureRunsCleanly) {
  const Result r = cli(args());
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::exists(path("o.npy")));
}

TEST_F(cli_run, BadFlagValuesAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--scale", "0"},      {"--scale", "-1"},    {"--scale", "nan"},    {"--scale", "inf"},
      {"--scale", "abc"},    {"--scale", "1e-60"}, {"--layout", "bsdh"},  {"--layout", ""},
      {"--isa", "sse9"},     {"--threads", "-1"},  {"--threads", "many"}, {"--threads", "100000"},
      {"--bogus"},           {"--lse", path("o.npy")}, {"--window-left", "-2"}, {"--window-right", "x"},
      {"--softcap", "-1"},   {"--isa", "neon"},
  };
  for (const auto& c : cases) {
    const Result r = cli(args(c));
    EXPECT_EQ(r.code, 2) << c[0] << "\n" << describe(r);
    EXPECT_THAT(r.err, HasSubstr(c[0]));
    EXPECT_FALSE(fs::exists(path("o.npy"))) << c[0];
  }
  // A required flag missing, and no subcommand at all.
  Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy")});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--out"));
  r = cli({});
  EXPECT_EQ(r.code, 2) << describe(r);
}

// What the library checks comes back in the command line's words: the flag, and the library's message.
TEST_F(cli_run, LibraryRulesComeBackUnderTheFlags) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--scale", "0"}, "--scale: expected a finite number > 0"},
      {{"--scale", "1e-60"}, "--scale: expected a number representable in float32"},
      {{"--window-left", "-2"}, "--window-left: expected -1 (unbounded) or a key count >= 0, got -2"},
      {{"--softcap", "-1"}, "--softcap: expected 0 (off) or a finite number > 0"},
      {{"--threads", "100000"}, "--threads: expected 0 (all hardware threads) or 1..1024, got 100000"},
      {{"--isa", "sse9"}, "--isa: expected one of auto, scalar, avx2, avx512"},
  };
  for (const auto& [more, message] : cases) {
    const Result r = cli(args(more));
    EXPECT_EQ(r.code, 2) << message << "\n" << describe(r);
    EXPECT_THAT(r.err, HasSubstr("sdpa run: " + message));
  }
}

TEST_F(cli_run, MissingFile) {
  auto a = args();
  a[2] = path("nope.npy");
  expect_failure(a, "nope.npy");
  a[2] = dir_.string();  // a directory is not a file either
  expect_failure(a, "--q");
}

TEST_F(cli_run, ShapeMismatchBetweenQAndK) {
  write_f32(path("k.npy"), {2, 2, 5, 7});  // d = 7, q has d = 8
  expect_usage_error(args(), "--k " + path("k.npy") + ": expected head size d=8 (from q), got 7");
  write_f32(path("k.npy"), {2, 3, 5, 8});  // 3 KV heads do not divide 4 query heads
  expect_usage_error(args(), "k.npy");
  write_f32(path("k.npy"), {2, 2, 4, 8});  // 4 keys, 5 values
  expect_usage_error(args(), "v.npy");
}

TEST_F(cli_run, WrongDtype) {
  std::vector<std::int32_t> ints(2 * 4 * 6 * 8, 1);
  sdpa::io::write_npy(path("q.npy"), DType::i32, std::vector<std::int64_t>{2, 4, 6, 8}, ints.data());
  expect_usage_error(args(), "q.npy");
  const Result r = cli(args());
  EXPECT_THAT(r.err, HasSubstr("int32"));
}

TEST_F(cli_run, RankMismatchAndUnsupportedRank) {
  write_f32(path("k.npy"), {5, 8});
  expect_usage_error(args(), "k.npy");
  write_f32(path("q.npy"), {48});
  expect_usage_error(args(), "q.npy");
}

TEST_F(cli_run, ProbsLargerThanTheLibraryLimit) {
  // 16385² > 2^28 probabilities, from three inputs of 64 KiB each.
  for (const char* n : {"q.npy", "k.npy", "v.npy"}) write_f32(path(n), {16385, 1});
  const Result r = cli(args({"--probs", path("p.npy")}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--probs"));
  EXPECT_THAT(r.err, HasSubstr("268435456"));
  EXPECT_FALSE(fs::exists(path("o.npy")));
  EXPECT_FALSE(fs::exists(path("p.npy")));
}

TEST_F(cli_run, NoPartialOutputOnFailure) {
  // The computation fails: no output at all.
  write_f32(path("k.npy"), {2, 2, 5, 7});
  Result r = cli(args({"--lse", path("lse.npy"), "--probs", path("p.npy")}));
  EXPECT_EQ(r.code, 2) << describe(r);
  for (const char* n : {"o.npy", "lse.npy", "p.npy"}) EXPECT_FALSE(fs::exists(path(n))) << n;

  // A later output cannot be written (its name is too long for the file
  // system): the earlier one must not appear either.
  write_f32(path("k.npy"), {2, 2, 5, 8});
  const std::string too_long = path(std::string(300, 'x') + ".npy");
  r = cli(args({"--lse", too_long}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--lse"));
  EXPECT_FALSE(fs::exists(path("o.npy")));
  r = cli(args({"--lse", path("lse.npy"), "--probs", too_long}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_FALSE(fs::exists(path("o.npy")));
  EXPECT_FALSE(fs::exists(path("lse.npy")));

  // An output in a folder that does not exist.
  r = cli(args({"--lse", path("no/such/dir/lse.npy")}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_FALSE(fs::exists(path("o.npy")));
  EXPECT_THAT(tmp_leftovers(), ::testing::IsEmpty());
}

TEST_F(cli_run, ExistingOutputsAreLeftUnchangedByAFailingRun) {
  {
    std::ofstream(path("o.npy"), std::ios::binary) << "previous O";
    std::ofstream(path("lse.npy"), std::ios::binary) << "previous lse";
  }
  // A failing computation.
  write_f32(path("v.npy"), {2, 2, 4, 3});
  Result r = cli(args({"--lse", path("lse.npy")}));
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(slurp(path("o.npy")), "previous O");
  EXPECT_EQ(slurp(path("lse.npy")), "previous lse");

  // A failing later output, after O and lse could have been written.
  write_f32(path("v.npy"), {2, 2, 5, 3});
  r = cli(args({"--lse", path("lse.npy"), "--probs", path(std::string(300, 'p') + ".npy")}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_EQ(slurp(path("o.npy")), "previous O");
  EXPECT_EQ(slurp(path("lse.npy")), "previous lse");

  // A failing input read.
  auto missing = args({"--lse", path("lse.npy")});
  missing[2] = path("missing.npy");
  r = cli(missing);
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_EQ(slurp(path("o.npy")), "previous O");
  EXPECT_THAT(tmp_leftovers(), ::testing::IsEmpty());

  // And a successful run replaces them.
  r = cli(args({"--lse", path("lse.npy")}));
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(slurp(path("o.npy")), "previous O");
  read_values(path("o.npy"), DType::f32, {2, 4, 6, 3});
  read_values(path("lse.npy"), DType::f32, {2, 4, 6});
  EXPECT_THAT(tmp_leftovers(), ::testing::IsEmpty());
}

// ---------------------------------------------------------------------------
// Packed batches, decode and bench

using cli_packed = CliTest;
using cli_decode = CliTest;
using cli_bench = CliTest;

TEST_F(cli_packed, run_with_cu_seqlens_matches_reference) {
  const std::int64_t h = 2, d = 8;
  std::vector<std::int32_t> cu_q = {0, 3, 3, 10}, cu_k = {0, 5, 9, 20};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  auto randn = [&](std::size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = normal(rng);
    return x;
  };
  const std::vector<float> q = randn(10 * h * d), k = randn(20 * h * d), v = randn(20 * h * d);
  const std::vector<std::int64_t> sq = {10, h, d}, sk = {20, h, d}, sc = {4};
  sdpa::io::write_npy(path("q.npy"), DType::f32, sq, q.data());
  sdpa::io::write_npy(path("k.npy"), DType::f32, sk, k.data());
  sdpa::io::write_npy(path("v.npy"), DType::f32, sk, v.data());
  sdpa::io::write_npy(path("cq.npy"), DType::i32, sc, cu_q.data());
  sdpa::io::write_npy(path("ck.npy"), DType::i32, sc, cu_k.data());
  const std::vector<std::string> common = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                           "--cu-seqlens-q", path("cq.npy"), "--cu-seqlens-k", path("ck.npy"),
                                           "--causal"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result fast = cli(with({"--out", path("o.npy"), "--lse", path("l.npy")}));
  ASSERT_EQ(fast.code, 0) << fast.err;
  Result ref = cli(with({"--out", path("o_ref.npy"), "--reference"}));
  ASSERT_EQ(ref.code, 0) << ref.err;
  const sdpa::io::NpyArray o = sdpa::io::read_npy(path("o.npy")), o_ref = sdpa::io::read_npy(path("o_ref.npy"));
  ASSERT_EQ(o.shape, (std::vector<std::int64_t>{10, h, d}));
  for (std::int64_t i = 0; i < o.numel(); ++i) EXPECT_NEAR(o.as<float>()[i], o_ref.as<double>()[i], 1e-5);
  EXPECT_EQ(sdpa::io::read_npy(path("l.npy")).shape, (std::vector<std::int64_t>{h, 10}));
  // Non-monotone prefix sums: a usage error naming the flag and file, no output.
  std::vector<std::int32_t> bad = {0, 5, 3, 10};
  sdpa::io::write_npy(path("bad.npy"), DType::i32, sc, bad.data());
  std::vector<std::string> a = common;
  a[8] = path("bad.npy");
  a.insert(a.end(), {"--out", path("o2.npy")});
  Result r = cli(a);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cu-seqlens-q " + path("bad.npy") + ": expected non-decreasing"));
  EXPECT_FALSE(fs::exists(path("o2.npy")));
}

TEST_F(cli_decode, small_run_checks_the_oracle_and_reports_bandwidth) {
  for (const char* paged : {"", "--paged"}) {
    std::vector<std::string> a = {"decode", "--prompt", "300", "--tokens", "5", "--heads", "8", "--kv-heads", "2",
                                  "--d", "64", "--page-size", "7"};
    if (*paged) a.push_back(paged);
    Result r = cli(a);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("tokens/s"));
    EXPECT_THAT(r.out, HasSubstr("of the measured bandwidth"));
    EXPECT_THAT(r.out, HasSubstr("last step vs the float64 oracle"));
  }
  EXPECT_EQ(cli({"decode", "--heads", "8", "--kv-heads", "3"}).code, 2);
  const Result r = cli({"decode", "--isa", "sse9"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("sdpa decode: --isa: expected one of auto, scalar, avx2, avx512"));
}

TEST_F(cli_bench, small_table_and_json) {
  Result r = cli({"bench", "--shapes", "prefill", "--n", "128", "--repeats", "1", "--json", path("b.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("FMA peak"));
  EXPECT_THAT(r.out, HasSubstr("%peak"));
  const std::string json = slurp(path("b.json"));
  EXPECT_THAT(json, HasSubstr("\"fma_peak_gflops\""));
  EXPECT_THAT(json, HasSubstr("\"speedup\""));
  EXPECT_EQ(cli({"bench", "--shapes", "sideways"}).code, 2);
}

// Occurrences of `what` in `text`.
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// --paged: each decode row again over a shuffled paged cache, timed beside
// the contiguous call (in every storage, int8 with its scales in pages).
TEST_F(cli_bench, paged_decode_rows_beside_the_contiguous_ones) {
  Result r = cli({"bench", "--shapes", "decode", "--nkv", "100", "--paged", "7", "--dtype", "f32,f16,i8", "--repeats",
                  "1", "--no-baseline", "--json", path("p.json")});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("paged ms"));
  EXPECT_THAT(r.out, HasSubstr("vs contig"));
  const std::string json = slurp(path("p.json"));
  EXPECT_EQ(count(json, "\"paged_vs_contiguous\""), 6u) << json;  // GQA and MHA, three storages
  EXPECT_EQ(count(json, "\"paged_ms\""), 6u);
  r = cli({"bench", "--shapes", "prefill", "--n", "64", "--paged", "7", "--repeats", "1", "--no-baseline"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, Not(HasSubstr("paged ms")));  // prefill rows have no paged column
  r = cli({"bench", "--shapes", "decode", "--paged", "0"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("sdpa bench: --paged: expected a page size >= 1, got 0"));
  r = cli({"bench", "--backward", "--paged", "16"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--paged: paged rows are decode rows"));
}

TEST_F(cli_bench, dtypes_side_by_side_with_both_peers) {
  // A stand-in for both peers: prints the line peer_bench.py and ggml_flash_attn print, whatever it is asked.
  const std::string peer = path("peer.sh");
  {
    std::ofstream f(peer);
    f << "#!/bin/sh\necho '{\"peer\": \"stand-in\", \"ms\": 1.5, \"kernel\": \"stand-in peer\"}'\n";
  }
  fs::permissions(peer, fs::perms::owner_all);
  Result r = cli({"bench", "--dtype", "f32,bf16", "--dtype", "i8", "--n", "64", "--nkv", "128", "--repeats", "1",
                  "--no-baseline", "--round-p", "--python", peer, "--ggml", peer, "--json", path("b.json")});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* column : {"dtype", "vs f32", "torch ms", "vs torch", "ggml ms", "vs ggml", "%bw"})
    EXPECT_THAT(r.out, HasSubstr(column));
  EXPECT_THAT(r.out, HasSubstr("i8: K, V int8 with a float16 scale per 32 values"));
  EXPECT_THAT(r.out, HasSubstr("--round-p"));
  EXPECT_THAT(r.out, Not(HasSubstr("not run")));
  // 4 prefill and 2 decode shapes (GQA 32/8 and MHA 32/32), each in the three storages.
  EXPECT_EQ(count(r.out, " bf16 "), 6u) << r.out;
  EXPECT_EQ(count(r.out, " i8 "), 6u) << r.out;
  const std::string json = slurp(path("b.json"));
  EXPECT_EQ(count(json, "\"dtype\": \"bf16\""), 6u);
  EXPECT_EQ(count(json, "\"vs_f32\""), 18u);
  EXPECT_EQ(count(json, "\"torch_ms\""), 12u);  // the f32 and bf16 rows (torch has no int8 K/V)
  EXPECT_EQ(count(json, "\"ort_ms\""), 0u);     // onnxruntime only with --peers
  EXPECT_EQ(count(json, "\"ggml_ms\""), 6u);   // every decode row (i8 as ggml's q8_0)
  EXPECT_THAT(json, HasSubstr("\"round_p\": true"));
  EXPECT_THAT(json, HasSubstr("\"i8_scales\""));
  EXPECT_THAT(json, HasSubstr("\"Hkv\": 32"));
}

// A stand-in for the Python of --peers: run as `python peer_bench.py PEER ...`, it answers as peer_bench.py
// does for the peers matching `timed` (a shell case pattern) and as a Python without the package for the others.
std::string fake_python(const std::string& file, const std::string& timed) {
  {
    std::ofstream f(file);
    f << "#!/bin/sh\n"
         "case \"$2\" in " << timed << ")\n"
         "  echo '{\"peer\": \"'$2'\", \"ms\": 2.0, \"kernel\": \"stand-in '$2'\"}'; exit 0;;\n"
         "esac\n"
         "echo '{\"peer\": \"'$2'\", \"error\": \"not importable: No module named '$2'\"}'; exit 3\n";
  }
  fs::permissions(file, fs::perms::owner_all);
  return file;
}

// Sets an environment variable for the life of a test.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

TEST_F(cli_bench, peers_time_torch_and_onnxruntime_and_skip_what_is_missing) {
  const std::vector<std::string> small = {"bench", "--peers", "--dtype", "f32,f16", "--n", "32", "--nkv", "64",
                                          "--repeats", "1", "--no-baseline"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = small;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // Both peers present, under --python: their columns on every f32 and f16 row, prefill and decode.
  const std::string both = fake_python(path("both.sh"), "torch|onnxruntime");
  Result r = cli(with({"--python", both, "--json", path("b.json")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* column : {"torch ms", "vs torch", "ort ms", "vs ort"}) EXPECT_THAT(r.out, HasSubstr(column));
  EXPECT_THAT(r.out, HasSubstr("peer: stand-in onnxruntime"));
  std::string json = slurp(path("b.json"));
  // 4 prefill and 2 decode shapes in f32 and f16.
  EXPECT_EQ(count(json, "\"torch_ms\""), 12u) << json;
  EXPECT_EQ(count(json, "\"ort_ms\""), 12u) << json;
  EXPECT_EQ(count(json, "\"vs_ort\""), 12u) << json;
  EXPECT_THAT(json, HasSubstr("\"onnxruntime\": \"stand-in onnxruntime\""));

  // The default Python ($SDPA_PEER_PYTHON) with torch but no onnxruntime: the bench goes on without it.
  {
    const ScopedEnv env("SDPA_PEER_PYTHON", fake_python(path("torch_only.sh"), "torch"));
    r = cli(with({"--json", path("t.json")}));
  }
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(count(r.out, "peer: onnxruntime not timed: not importable: No module named onnxruntime"), 1u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("pip install onnxruntime"));
  EXPECT_THAT(r.out, HasSubstr("vs torch"));
  EXPECT_THAT(r.out, Not(HasSubstr("ort ms")));
  json = slurp(path("t.json"));
  EXPECT_EQ(count(json, "\"torch_ms\""), 12u);
  EXPECT_EQ(count(json, "\"ort_ms\""), 0u);

  // A Python with neither: both skipped, one line each, sdpa's table still printed.
  {
    const ScopedEnv env("SDPA_PEER_PYTHON", fake_python(path("neither.sh"), "none"));
    r = cli(small);
  }
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(count(r.out, "peer: PyTorch not timed"), 1u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("pip install torch"));
  EXPECT_EQ(count(r.out, "peer: onnxruntime not timed"), 1u) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("vs torch")));
  EXPECT_THAT(r.out, HasSubstr("GFLOP/s"));
  EXPECT_EQ(count(r.out, "prefill "), 8u) << r.out;

  // --backward --peers: torch's backward only, and onnxruntime said to have none, once.
  r = cli({"bench", "--backward", "--peers", "--n", "32", "--repeats", "1", "--python", both});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("vs torch"));
  EXPECT_EQ(count(r.out, "onnxruntime not timed: it has no attention backward"), 1u) << r.out;
}

TEST_F(cli_bench, bad_dtype_and_peer_flags_are_usage_errors) {
  Result r = cli({"bench", "--dtype", "f32,fp8"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("sdpa bench: --dtype: expected f32, f16, bf16 or i8, got 'fp8'"));
  r = cli({"bench", "--backward", "--dtype", "bf16"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--dtype: --backward times float32"));
  r = cli({"bench", "--ggml", path("missing")});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--ggml: expected the ggml_flash_attn program"));
  r = cli({"bench", "--peers", "--python", path("missing")});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("sdpa bench: --python: expected a Python executable (a path, or a name on PATH), got '" +
                               path("missing") + "' (not an executable file)"));
  r = cli({"bench", "--peers", "--python", "no-such-python-on-path"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--python: expected a Python executable"));
  r = cli({"bench", "--peers", "--shapes", "sideways"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--shapes: expected all, prefill or decode, got 'sideways'"));
  r = cli({"bench", "--shapes", "decode", "--nkv", "0"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--nkv: expected cache lengths >= 1, got 0"));
}

}  // namespace
