// `sdpa run` and `sdpa decode` with 16-bit and int8 storage, end to end: the
// binary (SDPA_CLI) is run as a separate process, and what it writes is
// compared with the library called here on the same values in the same
// dtypes (bit for bit: the results do not depend on the thread count), and
// with the float64 oracle within the tolerance of the output's dtype.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "half.h"
#include "io/npy.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/tensor_view.h"
#include "support/cli_fixture.h"

namespace {

namespace fs = std::filesystem;
using sdpa::DType;
using sdpa::TensorView;
using sdpa::test::Result;
using ::testing::HasSubstr;

class CliStorageTest : public sdpa::test::CliFixture {
 public:
  Result run_cli(const std::vector<std::string>& args) const { return cli(args); }

 protected:
  CliStorageTest() : CliFixture("sdpa_cli_storage_test_") {}
};

// Suite names start with "cli" so that `ctest -R cli` selects these tests too.
using cli_storage = CliStorageTest;

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

std::int64_t product(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t x : s) n *= x;
  return n;
}

// N(0, 1) values as float32.
std::vector<float> randn(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(product(shape)));
  for (float& e : x) e = normal(rng);
  return x;
}

// x in `dtype` (rounded to nearest even), as the bytes of a C-order array.
std::vector<std::byte> as_dtype(const std::vector<float>& x, DType dtype) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::byte> bytes(x.size() * sdpa::dtype_size(dtype));
  sdpa::convert(TensorView::contiguous(x.data(), DType::f32, {n}), TensorView::contiguous(bytes.data(), dtype, {n}));
  return bytes;
}

// An array with its bytes, for files and for the library's views.
struct Array {
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  TensorView view() const { return TensorView::contiguous(bytes.data(), dtype, std::span<const std::int64_t>(shape)); }
  TensorView view_mut() { return TensorView::contiguous(bytes.data(), dtype, std::span<const std::int64_t>(shape)); }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<std::size_t>(product(shape)));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = sdpa::load_element(bytes.data(), dtype, static_cast<std::int64_t>(i));
    return v;
  }
};

Array random_array(DType dtype, std::vector<std::int64_t> shape, std::uint64_t seed) {
  const std::vector<float> x = randn(shape, seed);
  return {dtype, std::move(shape), as_dtype(x, dtype)};
}

Array empty_array(DType dtype, std::vector<std::int64_t> shape) {
  Array a{dtype, std::move(shape), {}};
  a.bytes.resize(static_cast<std::size_t>(product(a.shape)) * sdpa::dtype_size(dtype));
  return a;
}

void write(const std::string& path, const Array& a) { sdpa::io::write_npy(path, a.dtype, a.shape, a.bytes.data()); }

// A file as an Array, its dtype and shape checked.
Array read(const std::string& path, DType want, const std::vector<std::int64_t>& shape) {
  const sdpa::io::NpyArray f = sdpa::io::read_npy(path);
  EXPECT_EQ(f.dtype, want) << path;
  EXPECT_EQ(f.shape, shape) << path;
  return {f.dtype, f.shape, f.data};
}

// |got - want| <= atol + rtol·|want| everywhere.
void expect_close(const Array& got, const std::vector<double>& want, double rtol, double atol, const char* what) {
  const std::vector<double> g = got.values();
  ASSERT_EQ(g.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < g.size() && reported < 5; ++i)
    if (!(std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g[i] << ", want " << want[i];
      ++reported;
    }
}

// [B, H, Nq, d] x [B, Hkv, Nkv, d|dv], causal, GQA: the sizes of every test here.
constexpr std::int64_t kB = 2, kH = 4, kHkv = 2, kNq = 6, kNkv = 9, kD = 16, kDv = 8;
const std::vector<std::int64_t> kQShape{kB, kH, kNq, kD}, kKShape{kB, kHkv, kNkv, kD}, kVShape{kB, kHkv, kNkv, kDv},
    kOShape{kB, kH, kNq, kDv}, kLseShape{kB, kH, kNq};

// The library's forward (and, with d_o, backward) on the given arrays, as
// `sdpa run --causal` does it: O in o_dtype, lse float32, gradients in grad_dtype.
struct Library {
  Array o, lse, dq, dk, dv;
};
Library library(const Array& q, const Array& k, const Array& v, DType o_dtype, const Array* d_o = nullptr,
                DType grad_dtype = DType::f32) {
  Library r{empty_array(o_dtype, kOShape), empty_array(DType::f32, kLseShape), {}, {}, {}};
  sdpa::Options opt;
  opt.causal = true;
  opt.lse = r.lse.view_mut();
  sdpa::attention(q.view(), k.view(), v.view(), r.o.view_mut(), opt);
  if (d_o) {
    r.dq = empty_array(grad_dtype, kQShape);
    r.dk = empty_array(grad_dtype, kKShape);
    r.dv = empty_array(grad_dtype, kVShape);
    sdpa::Options bopt;
    bopt.causal = true;
    sdpa::attention_backward(q.view(), k.view(), v.view(), r.o.view(), r.lse.view(), d_o->view(),
                             {.dq = r.dq.view_mut(), .dk = r.dk.view_mut(), .dv = r.dv.view_mut()}, bopt);
  }
  return r;
}

// O from the float64 oracle on the values as stored.
std::vector<double> oracle(const Array& q, const Array& k, const Array& v) {
  Array o = empty_array(DType::f64, kOShape);
  sdpa::Options opt;
  opt.causal = true;
  sdpa::reference_attention(q.view(), k.view(), v.view(), o.view_mut(), opt);
  return o.values();
}

// ---------------------------------------------------------------------------
// sdpa run

TEST_F(cli_storage, float16_files_give_float16_outputs_equal_to_the_library) {
  const Array q = random_array(DType::f16, kQShape, 1), k = random_array(DType::f16, kKShape, 2),
              v = random_array(DType::f16, kVShape, 3), d_o = random_array(DType::f16, kOShape, 4);
  for (const auto& [name, a] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"do", &d_o}})
    write(path(std::string(name) + ".npy"), *a);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--causal", "--out",
                        path("o.npy"), "--lse", path("lse.npy"), "--do", path("do.npy"), "--dq", path("dq.npy"),
                        "--dk", path("dk.npy"), "--dv", path("dv.npy")});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("float16"));

  const Library want = library(q, k, v, DType::f16, &d_o, DType::f16);
  EXPECT_EQ(read(path("o.npy"), DType::f16, kOShape).bytes, want.o.bytes);
  EXPECT_EQ(read(path("lse.npy"), DType::f32, kLseShape).bytes, want.lse.bytes);
  EXPECT_EQ(read(path("dq.npy"), DType::f16, kQShape).bytes, want.dq.bytes);
  EXPECT_EQ(read(path("dk.npy"), DType::f16, kKShape).bytes, want.dk.bytes);
  EXPECT_EQ(read(path("dv.npy"), DType::f16, kVShape).bytes, want.dv.bytes);
  // float16's rounding (2^-11 relative) and float32 accumulation.
  expect_close(read(path("o.npy"), DType::f16, kOShape), oracle(q, k, v), 1.0 / 1024, 1e-4, "O");
}

TEST_F(cli_storage, storage_bf16_equals_a_bfloat16_library_call) {
  // float32 files, rounded to bfloat16 on load.
  const std::vector<float> qf = randn(kQShape, 5), kf = randn(kKShape, 6), vf = randn(kVShape, 7);
  write(path("q.npy"), {DType::f32, kQShape, as_dtype(qf, DType::f32)});
  write(path("k.npy"), {DType::f32, kKShape, as_dtype(kf, DType::f32)});
  write(path("v.npy"), {DType::f32, kVShape, as_dtype(vf, DType::f32)});
  const Array q{DType::bf16, kQShape, as_dtype(qf, DType::bf16)}, k{DType::bf16, kKShape, as_dtype(kf, DType::bf16)},
      v{DType::bf16, kVShape, as_dtype(vf, DType::bf16)};
  const std::vector<std::string> common = {"run",  "--q", path("q.npy"), "--k",       path("k.npy"), "--v",
                                           path("v.npy"), "--causal", "--storage", "bf16"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = common;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };

  // By default O is float32 (.npy cannot hold bfloat16).
  Result r = cli(with({"--out", path("o.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_THAT(r.out, HasSubstr("float32 as bfloat16"));
  const Array o = read(path("o.npy"), DType::f32, kOShape);
  EXPECT_EQ(o.bytes, library(q, k, v, DType::f32).o.bytes);
  // From bfloat16 values, exactly: only float32 accumulation is left.
  expect_close(o, oracle(q, k, v), 1e-5, 1e-6, "O");

  r = cli(with({"--out", path("o16.npy"), "--out-dtype", "f16"}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(read(path("o16.npy"), DType::f16, kOShape).bytes, library(q, k, v, DType::f16).o.bytes);
}

TEST_F(cli_storage, out_dtype_f32_with_float16_files) {
  const Array q = random_array(DType::f16, kQShape, 8), k = random_array(DType::f16, kKShape, 9),
              v = random_array(DType::f16, kVShape, 10), d_o = random_array(DType::f16, kOShape, 11);
  for (const auto& [name, a] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"do", &d_o}})
    write(path(std::string(name) + ".npy"), *a);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--causal", "--out",
                        path("o.npy"), "--out-dtype", "f32", "--do", path("do.npy"), "--dq", path("dq.npy"), "--dk",
                        path("dk.npy"), "--dv", path("dv.npy")});
  ASSERT_EQ(r.code, 0) << describe(r);
  const Library want = library(q, k, v, DType::f32, &d_o, DType::f32);
  const Array o = read(path("o.npy"), DType::f32, kOShape);
  EXPECT_EQ(o.bytes, want.o.bytes);
  EXPECT_EQ(read(path("dq.npy"), DType::f32, kQShape).bytes, want.dq.bytes);
  EXPECT_EQ(read(path("dk.npy"), DType::f32, kKShape).bytes, want.dk.bytes);
  EXPECT_EQ(read(path("dv.npy"), DType::f32, kVShape).bytes, want.dv.bytes);
  expect_close(o, oracle(q, k, v), 1e-5, 1e-6, "O");
}

// Files of different dtypes go to the library as they are; O follows Q and
// each gradient its own input.
TEST_F(cli_storage, mixed_files_are_read_as_they_are) {
  const Array q = random_array(DType::f32, kQShape, 12), k = random_array(DType::f16, kKShape, 13),
              v = random_array(DType::f16, kVShape, 14), d_o = random_array(DType::f32, kOShape, 15);
  for (const auto& [name, a] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"do", &d_o}})
    write(path(std::string(name) + ".npy"), *a);
  const Result r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--causal", "--out",
                        path("o.npy"), "--do", path("do.npy"), "--dq", path("dq.npy"), "--dk", path("dk.npy"), "--dv",
                        path("dv.npy")});
  ASSERT_EQ(r.code, 0) << describe(r);
  Library want = library(q, k, v, DType::f32);
  // The gradients in their inputs' dtypes: dq float32, dk and dv float16.
  Array dq = empty_array(DType::f32, kQShape), dk = empty_array(DType::f16, kKShape),
        dv = empty_array(DType::f16, kVShape);
  sdpa::Options opt;
  opt.causal = true;
  sdpa::attention_backward(q.view(), k.view(), v.view(), want.o.view(), want.lse.view(), d_o.view(),
                           {.dq = dq.view_mut(), .dk = dk.view_mut(), .dv = dv.view_mut()}, opt);
  EXPECT_EQ(read(path("o.npy"), DType::f32, kOShape).bytes, want.o.bytes);
  EXPECT_EQ(read(path("dq.npy"), DType::f32, kQShape).bytes, dq.bytes);
  EXPECT_EQ(read(path("dk.npy"), DType::f16, kKShape).bytes, dk.bytes);
  EXPECT_EQ(read(path("dv.npy"), DType::f16, kVShape).bytes, dv.bytes);
}

TEST_F(cli_storage, reference_reads_float16_and_writes_float64_unless_told) {
  const Array q = random_array(DType::f16, kQShape, 16), k = random_array(DType::f16, kKShape, 17),
              v = random_array(DType::f16, kVShape, 18);
  write(path("q.npy"), q);
  write(path("k.npy"), k);
  write(path("v.npy"), v);
  const std::vector<std::string> common = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                           "--causal", "--reference"};
  std::vector<std::string> a = common;
  a.insert(a.end(), {"--out", path("o.npy")});
  Result r = cli(a);
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::vector<double> want = oracle(q, k, v);
  EXPECT_EQ(read(path("o.npy"), DType::f64, kOShape).values(), want);
  a = common;
  a.insert(a.end(), {"--out", path("o16.npy"), "--out-dtype", "f16"});
  r = cli(a);
  ASSERT_EQ(r.code, 0) << describe(r);
  expect_close(read(path("o16.npy"), DType::f16, kOShape), want, 1.0 / 2048, 1e-7, "O");  // rounded once
}

TEST_F(cli_storage, bad_values_are_usage_errors_naming_the_flag) {
  write(path("q.npy"), random_array(DType::f32, kQShape, 1));
  write(path("k.npy"), random_array(DType::f32, kKShape, 2));
  write(path("v.npy"), random_array(DType::f32, kVShape, 3));
  const std::vector<std::vector<std::string>> run_cases = {
      {"--storage", "f8"},      {"--storage", ""},       {"--storage", "F16"},  {"--storage", "i8"},
      {"--out-dtype", "bf16"},  {"--out-dtype", "f64"},  {"--out-dtype", ""},   {"--out-dtype", "float16"},
  };
  for (const auto& c : run_cases) {
    std::vector<std::string> a = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out",
                                  path("o.npy")};
    a.insert(a.end(), c.begin(), c.end());
    const Result r = cli(a);
    EXPECT_EQ(r.code, 2) << c[0] << " '" << c[1] << "'\n" << describe(r);
    EXPECT_THAT(r.err, HasSubstr("sdpa run: " + c[0] + ": expected")) << c[1];
    EXPECT_FALSE(fs::exists(path("o.npy"))) << c[0] << " " << c[1];
  }
  // int8 files: the library needs scales with them, which sdpa run does not take.
  const std::vector<std::int8_t> ones(static_cast<std::size_t>(product(kKShape)), 1);
  sdpa::io::write_npy(path("k8.npy"), DType::i8, kKShape, ones.data());
  Result r = cli({"run", "--q", path("q.npy"), "--k", path("k8.npy"), "--v", path("v.npy"), "--out", path("o.npy")});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--k " + path("k8.npy") + ": expected float16, float32 or float64"));
  EXPECT_FALSE(fs::exists(path("o.npy")));

  // bfloat16 is refused for what it is.
  r = cli({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy"),
           "--out-dtype", "bf16"});
  EXPECT_THAT(r.err, HasSubstr(".npy has no bfloat16"));

  const std::vector<std::vector<std::string>> decode_cases = {
      {"--kv-dtype", "i4"}, {"--kv-dtype", ""}, {"--kv-dtype", "f64"}, {"--kv-group", "0"}, {"--kv-group", "x"},
      {"--kv-group", "48", "--kv-dtype", "i8"},  // does not divide --d 128
  };
  for (const auto& c : decode_cases) {
    std::vector<std::string> a = {"decode"};
    a.insert(a.end(), c.begin(), c.end());
    r = cli(a);
    EXPECT_EQ(r.code, 2) << c[0] << " '" << c[1] << "'\n" << describe(r);
    EXPECT_THAT(r.err, HasSubstr("sdpa decode: " + c[0] + ": expected")) << c[1];
  }
}

TEST_F(cli_storage, help_names_the_flags) {
  Result r = cli({"run", "--help"});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* s : {"--storage", "auto|f32|f16|bf16", "--out-dtype", "auto|f32|f16|f64"})
    EXPECT_THAT(r.out, HasSubstr(s));
  r = cli({"decode", "--help"});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* s : {"--kv-dtype", "f32|f16|bf16|i8", "--kv-group"}) EXPECT_THAT(r.out, HasSubstr(s));
}

// ---------------------------------------------------------------------------
// sdpa decode

// One small decode: exit 0, the cache's format, and the bytes read per
// cached token (K and V of Hkv = 2 heads of d = 64, scales included).
void expect_decode(const CliStorageTest& t, const std::vector<std::string>& flags, const std::string& format,
                   int token_bytes) {
  std::vector<std::string> a = {"decode", "--prompt", "64", "--tokens", "2", "--heads", "4", "--kv-heads", "2",
                                "--d", "64"};
  a.insert(a.end(), flags.begin(), flags.end());
  const Result r = t.run_cli(a);
  ASSERT_EQ(r.code, 0) << format << "\n" << describe(r);
  EXPECT_THAT(r.out, HasSubstr(format));
  // Appended piecewise: `"(" + std::string` trips a false -Wrestrict in GCC 12.
  std::string bytes = "(";
  bytes += std::to_string(token_bytes);
  bytes += " bytes per cached token";
  EXPECT_THAT(r.out, HasSubstr(bytes));
  EXPECT_THAT(r.out, HasSubstr("last step vs the float64 oracle"));
}

TEST_F(cli_storage, decode_with_an_int8_cache) {
  expect_decode(*this, {"--kv-dtype", "i8"}, "contiguous cache of int8 with a float16 scale per 32 values",
                2 * 2 * (64 + 2 * 2));
  expect_decode(*this, {"--kv-dtype", "i8", "--kv-group", "16", "--paged", "--page-size", "7"},
                "paged cache (page size 7) of int8 with a float16 scale per 16 values", 2 * 2 * (64 + 4 * 2));
}

TEST_F(cli_storage, decode_with_a_bfloat16_cache) {
  expect_decode(*this, {"--kv-dtype", "bf16"}, "contiguous cache of bfloat16", 2 * 2 * 64 * 2);
}

}  // namespace
