// End-to-end tests of `sdpa run`'s masks, score modifiers, dropout and
// backward: the binary (SDPA_CLI) is run on .npy files made here, and what it
// writes is compared bit for bit with the library called here on the same data,
// with the same options and thread count (--threads 2 and Options::threads = 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "support/cli_fixture.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/dropout.h"
#include "sdpa/serving.h"
#include "sdpa/tensor_view.h"
#include "support/problem.h"

namespace {

namespace fs = std::filesystem;
using sdpa::DType;
using sdpa::Options;
using sdpa::TensorView;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// ---------------------------------------------------------------------------
// Running the binary

using sdpa::test::Result;
using sdpa::test::shell_quote;
using sdpa::test::slurp;

// Whether two files hold the same bytes (a test's message names both, not their contents).
bool same_bytes(const std::string& a, const std::string& b) { return slurp(a) == slurp(b); }

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

class CliTrainTest : public sdpa::test::CliFixture {
 protected:
  CliTrainTest() : CliFixture("sdpa_cli_train_test_") {}
};

// ---------------------------------------------------------------------------
// Files and comparisons

std::int64_t product(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t x : s) n *= x;
  return n;
}

void write(const std::string& p, const std::vector<std::int64_t>& shape, const std::vector<float>& x) {
  sdpa::io::write_npy(p, DType::f32, shape, x.data());
}

template <class T>
DType dtype_of() {
  return std::is_same_v<T, double> ? DType::f64 : std::is_same_v<T, float> ? DType::f32 : DType::boolean;
}

// The file holds exactly `want` (dtype, shape and every bit).
template <class T>
void expect_file_equals(const std::string& p, const std::vector<std::int64_t>& shape, const std::vector<T>& want) {
  SCOPED_TRACE(p);
  ASSERT_TRUE(fs::exists(p));
  const sdpa::io::NpyArray a = sdpa::io::read_npy(p);
  EXPECT_EQ(a.dtype, dtype_of<T>());
  EXPECT_EQ(a.shape, shape);
  ASSERT_EQ(a.data.size(), want.size() * sizeof(T));
  if (std::memcmp(a.data.data(), want.data(), a.data.size()) == 0) return;
  for (std::size_t i = 0; i < want.size(); ++i) {
    T got;
    std::memcpy(&got, a.data.data() + i * sizeof(T), sizeof(T));
    if (std::memcmp(&got, &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << "first difference at element " << i << ": file " << +got << ", library " << +want[i];
      return;
    }
  }
}

// [B, H, N, X] in the layout, rank 4 or 3 (B = 1 dropped).
std::vector<std::int64_t> file_shape(const std::string& layout, int rank, std::int64_t b, std::int64_t h,
                                     std::int64_t n, std::int64_t x) {
  std::vector<std::int64_t> s = layout == "bhsd" ? std::vector<std::int64_t>{b, h, n, x}
                                                 : std::vector<std::int64_t>{b, n, h, x};
  if (rank == 3) s.erase(s.begin());
  return s;
}

TensorView view4(const void* data, DType dtype, const std::string& layout, std::int64_t b, std::int64_t h,
                 std::int64_t n, std::int64_t x) {
  if (layout == "bshd") return TensorView::bshd(data, dtype, b, n, h, x);
  return TensorView::contiguous(data, dtype, {b, h, n, x});
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `a` with each FLAG VALUE pair of `pairs` set: the value after FLAG replaced
// where `a` has the flag, the pair appended where it has not (no flag twice).
std::vector<std::string> with_flags(std::vector<std::string> a, const std::vector<std::string>& pairs) {
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const auto at = std::find(a.begin(), a.end(), pairs[i]);
    if (at != a.end() && at + 1 != a.end()) {
      *(at + 1) = pairs[i + 1];
    } else {
      a.insert(a.end(), {pairs[i], pairs[i + 1]});
    }
  }
  return a;
}

std::string number(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

// float16 bits of a few values the masks use.
constexpr std::uint16_t kHalfZero = 0x0000, kHalfMinusInf = 0xFC00, kHalfMinusOne = 0xBC00, kHalfHalf = 0x3800;

// ---------------------------------------------------------------------------
// One call: files, the command line and the same call through the library.

enum class MaskKind { none, boolean, f32, f16 };

struct TrainCase {
  std::string name;
  std::string layout = "bhsd";
  int rank = 4;
  std::int64_t b = 2, h = 4, h_kv = 2, n_q = 7, n_kv = 11, d = 8, dv = 6;
  bool causal = false, top_left = false;
  std::int64_t window_left = -1;
  MaskKind mask = MaskKind::none;
  std::vector<std::int64_t> mask_shape;  // broadcastable to [B, H, Nq, Nkv]
  int alibi_rank = 0;                    // 0: none, 1: [H], 2: [B, H]
  bool sinks = false;
  double dropout = 0;
  std::uint64_t seed = 0, offset = 0;
  bool reference = false;
  bool backward = false, dsinks = false;
};

void PrintTo(const TrainCase& c, std::ostream* os) { *os << c.name; }

// The inputs of a case, as written to the files.
struct Data {
  std::vector<float> q, k, v, d_o, slopes, sinks, mask_f32;
  std::vector<std::uint8_t> mask_bool;
  std::vector<std::uint16_t> mask_f16;
  std::vector<std::int64_t> slopes_shape;
};

Data make_data(const TrainCase& c) {
  Data x;
  x.q = sdpa::test::randn(static_cast<std::size_t>(c.b * c.h * c.n_q * c.d), 1);
  x.k = sdpa::test::randn(static_cast<std::size_t>(c.b * c.h_kv * c.n_kv * c.d), 2);
  x.v = sdpa::test::randn(static_cast<std::size_t>(c.b * c.h_kv * c.n_kv * c.dv), 3);
  x.d_o = sdpa::test::randn(static_cast<std::size_t>(c.b * c.h * c.n_q * c.dv), 4);
  std::mt19937_64 rng(5);
  const std::size_t mask_n = static_cast<std::size_t>(product(c.mask_shape));
  switch (c.mask) {
    case MaskKind::none: break;
    case MaskKind::boolean:
      for (std::size_t i = 0; i < mask_n; ++i) x.mask_bool.push_back(rng() % 5 != 0);  // ~80% visible
      break;
    case MaskKind::f32:
      for (std::size_t i = 0; i < mask_n; ++i) {
        const int r = static_cast<int>(rng() % 6);
        x.mask_f32.push_back(r == 0 ? -std::numeric_limits<float>::infinity() : 0.25f * static_cast<float>(r - 3));
      }
      break;
    case MaskKind::f16: {
      const std::uint16_t values[] = {kHalfZero, kHalfMinusInf, kHalfMinusOne, kHalfHalf, kHalfZero};
      for (std::size_t i = 0; i < mask_n; ++i) x.mask_f16.push_back(values[rng() % 5]);
      break;
    }
  }
  if (c.alibi_rank > 0) {
    x.slopes_shape = c.alibi_rank == 1 ? std::vector<std::int64_t>{c.h} : std::vector<std::int64_t>{c.b, c.h};
    for (std::int64_t i = 0; i < product(x.slopes_shape); ++i)
      x.slopes.push_back(0.5f / static_cast<float>(1 << (i % 4)) + 0.01f * static_cast<float>(i));
  }
  if (c.sinks) {
    for (std::int64_t i = 0; i < c.h; ++i) x.sinks.push_back(0.3f * static_cast<float>(i) - 0.5f);
  }
  return x;
}

const void* mask_data(const TrainCase& c, const Data& x) {
  switch (c.mask) {
    case MaskKind::boolean: return x.mask_bool.data();
    case MaskKind::f32: return x.mask_f32.data();
    case MaskKind::f16: return x.mask_f16.data();
    case MaskKind::none: break;
  }
  return nullptr;
}

DType mask_dtype(const TrainCase& c) {
  return c.mask == MaskKind::boolean ? DType::boolean : c.mask == MaskKind::f16 ? DType::f16 : DType::f32;
}

// The files of a case and the command line that reads them (outputs o.npy,
// lse.npy and, for the backward, dq.npy, dk.npy, dv.npy, dsinks.npy).
using PathOf = std::function<std::string(const std::string&)>;

std::vector<std::string> write_files(const TrainCase& c, const Data& x, const PathOf& path) {
  write(path("q.npy"), file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.d), x.q);
  write(path("k.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.d), x.k);
  write(path("v.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.dv), x.v);
  std::vector<std::string> a = {"run",     "--q",  path("q.npy"),   "--k",       path("k.npy"), "--v",
                                path("v.npy"), "--out", path("o.npy"), "--lse",  path("lse.npy"), "--layout",
                                c.layout,  "--threads", "2"};
  if (c.causal) a.push_back("--causal");
  if (c.top_left) a.insert(a.end(), {"--align", "top-left"});
  if (c.window_left >= 0) a.insert(a.end(), {"--window-left", std::to_string(c.window_left)});
  if (c.mask != MaskKind::none) {
    sdpa::io::write_npy(path("mask.npy"), mask_dtype(c), c.mask_shape, mask_data(c, x));
    a.insert(a.end(), {"--mask", path("mask.npy")});
  }
  if (c.alibi_rank > 0) {
    sdpa::io::write_npy(path("slopes.npy"), DType::f32, x.slopes_shape, x.slopes.data());
    a.insert(a.end(), {"--alibi-slopes", path("slopes.npy")});
  }
  if (c.sinks) {
    sdpa::io::write_npy(path("sinks.npy"), DType::f32, std::vector<std::int64_t>{c.h}, x.sinks.data());
    a.insert(a.end(), {"--sinks", path("sinks.npy")});
  }
  if (c.dropout > 0) {
    a.insert(a.end(), {"--dropout", number(c.dropout), "--seed", std::to_string(c.seed), "--dropout-offset",
                       std::to_string(c.offset)});
  }
  if (c.reference) a.push_back("--reference");
  if (c.backward) {
    write(path("do.npy"), file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.dv), x.d_o);
    a.insert(a.end(), {"--do", path("do.npy"), "--dq", path("dq.npy"), "--dk", path("dk.npy"), "--dv", path("dv.npy")});
    if (c.dsinks) a.insert(a.end(), {"--dsinks", path("dsinks.npy")});
  }
  return a;
}

Options library_options(const TrainCase& c, const Data& x) {
  Options opt;
  opt.causal = c.causal;
  opt.align = c.top_left ? sdpa::Align::top_left : sdpa::Align::bottom_right;
  opt.window_left = c.window_left;
  opt.threads = 2;
  if (c.mask != MaskKind::none) {
    opt.mask = TensorView::contiguous(mask_data(c, x), mask_dtype(c), std::span<const std::int64_t>(c.mask_shape));
  }
  if (c.alibi_rank > 0) {
    opt.alibi_slopes =
        TensorView::contiguous(x.slopes.data(), DType::f32, std::span<const std::int64_t>(x.slopes_shape));
  }
  if (c.sinks) opt.sinks = TensorView::contiguous(x.sinks.data(), {c.h});
  opt.dropout_p = c.dropout;
  opt.dropout_seed = c.seed;
  opt.dropout_offset = c.offset;
  return opt;
}

// What the library writes for the case: float32 outputs on the fast path,
// float64 with the oracle (from the same float32 inputs, as the command line does).
template <class T>
struct LibraryResult {
  std::vector<T> o, lse, dq, dk, dv, dsinks;
};

template <class T>
LibraryResult<T> run_library(const TrainCase& c, const Data& x) {
  constexpr DType t = std::is_same_v<T, double> ? DType::f64 : DType::f32;
  LibraryResult<T> r;
  r.o.assign(static_cast<std::size_t>(c.b * c.h * c.n_q * c.dv), T(0));
  r.lse.assign(static_cast<std::size_t>(c.b * c.h * c.n_q), T(0));
  Options opt = library_options(c, x);
  const TensorView q = view4(x.q.data(), DType::f32, c.layout, c.b, c.h, c.n_q, c.d);
  const TensorView k = view4(x.k.data(), DType::f32, c.layout, c.b, c.h_kv, c.n_kv, c.d);
  const TensorView v = view4(x.v.data(), DType::f32, c.layout, c.b, c.h_kv, c.n_kv, c.dv);
  const TensorView o = view4(r.o.data(), t, c.layout, c.b, c.h, c.n_q, c.dv);
  const TensorView lse = TensorView::contiguous(r.lse.data(), t, {c.b, c.h, c.n_q});
  opt.lse = lse;
  if (c.reference) {
    sdpa::reference_attention(q, k, v, o, opt);
  } else {
    sdpa::attention(q, k, v, o, opt);
  }
  if (!c.backward) return r;
  opt.lse = {};
  r.dq.assign(x.q.size(), T(0));
  r.dk.assign(x.k.size(), T(0));
  r.dv.assign(x.v.size(), T(0));
  sdpa::Gradients g;
  g.dq = view4(r.dq.data(), t, c.layout, c.b, c.h, c.n_q, c.d);
  g.dk = view4(r.dk.data(), t, c.layout, c.b, c.h_kv, c.n_kv, c.d);
  g.dv = view4(r.dv.data(), t, c.layout, c.b, c.h_kv, c.n_kv, c.dv);
  if (c.dsinks) {
    r.dsinks.assign(static_cast<std::size_t>(c.h), T(0));
    g.dsinks = TensorView::contiguous(r.dsinks.data(), t, {c.h});
  }
  const TensorView d_o = view4(x.d_o.data(), DType::f32, c.layout, c.b, c.h, c.n_q, c.dv);
  if (c.reference) {
    sdpa::reference_attention_backward(q, k, v, o, lse, d_o, g, opt);
  } else {
    sdpa::attention_backward(q, k, v, o, lse, d_o, g, opt);
  }
  return r;
}

template <class T>
void expect_outputs_equal(const TrainCase& c, const PathOf& path) {
  const Data x = make_data(c);
  const LibraryResult<T> want = run_library<T>(c, x);
  std::vector<std::int64_t> lse_shape = {c.b, c.h, c.n_q};
  if (c.rank == 3) lse_shape.erase(lse_shape.begin());
  expect_file_equals(path("o.npy"), file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.dv), want.o);
  expect_file_equals(path("lse.npy"), lse_shape, want.lse);
  if (!c.backward) return;
  // Gradients that are all zero would compare equal however they were made.
  for (const std::vector<T>* g : {&want.dq, &want.dk, &want.dv})
    EXPECT_TRUE(std::any_of(g->begin(), g->end(), [](T e) { return e != T(0); }));
  expect_file_equals(path("dq.npy"), file_shape(c.layout, c.rank, c.b, c.h, c.n_q, c.d), want.dq);
  expect_file_equals(path("dk.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.d), want.dk);
  expect_file_equals(path("dv.npy"), file_shape(c.layout, c.rank, c.b, c.h_kv, c.n_kv, c.dv), want.dv);
  if (c.dsinks) expect_file_equals(path("dsinks.npy"), {c.h}, want.dsinks);
}

class RunMatchesTheLibrary : public CliTrainTest, public ::testing::WithParamInterface<TrainCase> {};

TEST_P(RunMatchesTheLibrary, Bitwise) {
  const TrainCase& c = GetParam();
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  const Result r = cli(write_files(c, x, p));
  ASSERT_EQ(r.code, 0) << describe(r);
  if (c.reference) {
    expect_outputs_equal<double>(c, p);
  } else {
    expect_outputs_equal<float>(c, p);
  }
  EXPECT_THAT(tmp_leftovers(), IsEmpty());
}

TrainCase with(TrainCase c, const std::function<void(TrainCase&)>& f) {
  f(c);
  return c;
}

TrainCase base_case() {
  TrainCase c;
  c.name = "base";
  return c;
}
const TrainCase kBase = base_case();

// Forward: masks (full and broadcast, each dtype), ALiBi, sinks, alignment.
INSTANTIATE_TEST_SUITE_P(
    cli_train_forward, RunMatchesTheLibrary,
    ::testing::Values(
        with(kBase, [](TrainCase& c) { c.name = "plain"; }),
        with(kBase, [](TrainCase& c) {
          c.name = "bool_mask_full";
          c.mask = MaskKind::boolean;
          c.mask_shape = {c.b, c.h, c.n_q, c.n_kv};
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "bool_mask_broadcast_keys";
          c.mask = MaskKind::boolean;
          c.mask_shape = {c.n_kv};
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "float_mask_broadcast_heads_rows";
          c.mask = MaskKind::f32;
          c.mask_shape = {c.h, 1, c.n_kv};
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "half_mask_broadcast_heads";
          c.mask = MaskKind::f16;
          c.mask_shape = {c.b, 1, c.n_q, c.n_kv};
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "bshd_mask_in_bhqk_axes";
          c.layout = "bshd";
          c.mask = MaskKind::boolean;
          c.mask_shape = {c.b, c.h, c.n_q, c.n_kv};
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "alibi_per_head_causal";
          c.alibi_rank = 1;
          c.causal = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "alibi_per_batch_and_head_top_left";
          c.alibi_rank = 2;
          c.top_left = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "sinks";
          c.sinks = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "causal_top_left";
          c.causal = true;
          c.top_left = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "window_top_left_bshd";
          c.layout = "bshd";
          c.window_left = 2;
          c.top_left = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "everything_bshd_rank3";
          c.layout = "bshd";
          c.rank = 3;
          c.b = 1;
          c.causal = true;
          c.mask = MaskKind::f32;
          c.mask_shape = {c.n_q, c.n_kv};
          c.alibi_rank = 1;
          c.sinks = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "everything_reference";
          c.reference = true;
          c.causal = true;
          c.top_left = true;
          c.mask = MaskKind::boolean;
          c.mask_shape = {c.h, c.n_q, c.n_kv};
          c.alibi_rank = 2;
          c.sinks = true;
        })),
    [](const ::testing::TestParamInfo<TrainCase>& info) { return info.param.name; });

// Dropout, forward only: the fast path and the oracle.
INSTANTIATE_TEST_SUITE_P(cli_train_dropout, RunMatchesTheLibrary,
                         ::testing::Values(with(kBase,
                                                [](TrainCase& c) {
                                                  c.name = "fast";
                                                  c.dropout = 0.25;
                                                  c.seed = 1234;
                                                  c.offset = 3;
                                                  c.causal = true;
                                                }),
                                           with(kBase,
                                                [](TrainCase& c) {
                                                  c.name = "reference_bshd";
                                                  c.layout = "bshd";
                                                  c.reference = true;
                                                  c.dropout = 0.5;
                                                  c.seed = 99;
                                                })),
                         [](const ::testing::TestParamInfo<TrainCase>& info) { return info.param.name; });

// Backward: dQ, dK, dV (and dsinks) in the inputs' layouts, fast path and oracle.
INSTANTIATE_TEST_SUITE_P(
    cli_train_backward, RunMatchesTheLibrary,
    ::testing::Values(
        with(kBase, [](TrainCase& c) {
          c.name = "gqa_causal";
          c.backward = true;
          c.causal = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "bshd";
          c.layout = "bshd";
          c.backward = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "bshd_rank3";
          c.layout = "bshd";
          c.rank = 3;
          c.b = 1;
          c.backward = true;
          c.causal = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "sinks_dsinks";
          c.backward = true;
          c.sinks = true;
          c.dsinks = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "mask_alibi_top_left";
          c.backward = true;
          c.causal = true;
          c.top_left = true;
          c.mask = MaskKind::f32;
          c.mask_shape = {c.b, 1, c.n_q, c.n_kv};
          c.alibi_rank = 1;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "dropout";
          c.backward = true;
          c.dropout = 0.2;
          c.seed = 7;
          c.offset = 1;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "reference";
          c.reference = true;
          c.backward = true;
          c.causal = true;
        }),
        with(kBase, [](TrainCase& c) {
          c.name = "reference_bshd_sinks_dsinks_dropout";
          c.reference = true;
          c.layout = "bshd";
          c.backward = true;
          c.sinks = true;
          c.dsinks = true;
          c.dropout = 0.3;
          c.seed = 5;
        })),
    [](const ::testing::TestParamInfo<TrainCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Alignment

using cli_train = CliTrainTest;

TEST_F(cli_train, AlignTopLeftAndBottomRightDifferWhenNqDiffersFromNkv) {
  TrainCase c = kBase;
  c.causal = true;
  c.n_q = 5;
  c.n_kv = 9;
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  std::vector<std::string> a = write_files(c, x, p);
  Result r = cli(a);
  ASSERT_EQ(r.code, 0) << describe(r);
  fs::rename(path("o.npy"), path("o_bottom_right.npy"));
  r = cli(with_flags(a, {"--align", "top-left"}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_FALSE(same_bytes(path("o.npy"), path("o_bottom_right.npy")));
  // Bottom-right is the default, and --align bottom-right says so.
  r = cli(with_flags(a, {"--out", path("o_explicit.npy"), "--align", "bottom-right"}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(same_bytes(path("o_explicit.npy"), path("o_bottom_right.npy")));
  // Each is the library's.
  c.top_left = true;
  expect_file_equals(path("o.npy"), file_shape(c.layout, 4, c.b, c.h, c.n_q, c.dv), run_library<float>(c, x).o);
  c.top_left = false;
  expect_file_equals(path("o_bottom_right.npy"), file_shape(c.layout, 4, c.b, c.h, c.n_q, c.dv),
                     run_library<float>(c, x).o);
}

// A float64 mask file is read as float32 on the fast path (as float64 Q, K, V are).
TEST_F(cli_train, AFloat64MaskIsUsedAsFloat32OnTheFastPath) {
  TrainCase c = kBase;
  c.mask = MaskKind::f32;
  c.mask_shape = {c.n_q, c.n_kv};
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  const std::vector<std::string> a = write_files(c, x, p);
  ASSERT_EQ(cli(a).code, 0);
  const std::vector<double> wide(x.mask_f32.begin(), x.mask_f32.end());
  sdpa::io::write_npy(path("mask64.npy"), DType::f64, c.mask_shape, wide.data());
  const Result r = cli(with_flags(a, {"--mask", path("mask64.npy"), "--out", path("o64.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(same_bytes(path("o64.npy"), path("o.npy")));
}

// ---------------------------------------------------------------------------
// Dropout

TEST_F(cli_train, DropoutMaskIsTheLibrarysKeepFunction) {
  TrainCase c = kBase;
  c.dropout = 0.3;
  c.seed = 20240607;
  c.offset = 11;
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  const std::vector<std::string> a = write_files(c, x, p);
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "fast");
    std::vector<std::string> run = with_flags(a, {"--dropout-mask", path("keep.npy")});
    if (reference) run.push_back("--reference");
    const Result r = cli(run);
    ASSERT_EQ(r.code, 0) << describe(r);
    const sdpa::io::NpyArray keep = sdpa::io::read_npy(path("keep.npy"));
    ASSERT_EQ(keep.dtype, DType::boolean);
    ASSERT_EQ(keep.shape, (std::vector<std::int64_t>{c.b, c.h, c.n_q, c.n_kv}));
    const bool* kept = keep.as<bool>();
    std::int64_t wrong = 0, count = 0;
    for (std::int64_t b = 0; b < c.b; ++b)
      for (std::int64_t h = 0; h < c.h; ++h)
        for (std::int64_t i = 0; i < c.n_q; ++i)
          for (std::int64_t j = 0; j < c.n_kv; ++j) {
            const bool want = sdpa::dropout_keep(c.dropout, c.seed, c.offset, c.h, b, h, i, j);
            const bool got = kept[((b * c.h + h) * c.n_q + i) * c.n_kv + j];
            wrong += got != want;
            count += got;
          }
    EXPECT_EQ(wrong, 0);
    // Some dropped, most kept (616 decisions at p = 0.3).
    EXPECT_GT(count, 0);
    EXPECT_LT(count, c.b * c.h * c.n_q * c.n_kv);
  }
}

TEST_F(cli_train, TheSameSeedGivesTheSameFilesAndAnotherSeedOthers) {
  TrainCase c = kBase;
  c.dropout = 0.4;
  c.seed = 42;
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  const std::vector<std::string> a = write_files(c, x, p);
  ASSERT_EQ(cli(with_flags(a, {"--dropout-mask", path("keep1.npy"), "--out", path("o1.npy")})).code, 0);
  ASSERT_EQ(cli(with_flags(a, {"--dropout-mask", path("keep2.npy"), "--out", path("o2.npy")})).code, 0);
  EXPECT_TRUE(same_bytes(path("keep1.npy"), path("keep2.npy")));
  EXPECT_TRUE(same_bytes(path("o1.npy"), path("o2.npy")));
  // Another seed or another offset: other decisions.
  ASSERT_EQ(cli(with_flags(a, {"--seed", "43", "--dropout-mask", path("keep3.npy"), "--out", path("o3.npy")})).code, 0);
  EXPECT_FALSE(same_bytes(path("keep3.npy"), path("keep1.npy")));
  EXPECT_FALSE(same_bytes(path("o3.npy"), path("o1.npy")));
  ASSERT_EQ(cli(with_flags(a, {"--dropout-offset", "1", "--dropout-mask", path("keep4.npy")})).code, 0);
  EXPECT_FALSE(same_bytes(path("keep4.npy"), path("keep1.npy")));
  // Dropout changes O: it is applied, not only reported.
  ASSERT_EQ(cli(with_flags(a, {"--dropout", "0", "--out", path("o_off.npy")})).code, 0);
  EXPECT_FALSE(same_bytes(path("o_off.npy"), path("o1.npy")));
}

// Without --dropout (or with --dropout 0) every key is kept, and --seed and
// --dropout-offset change nothing.
TEST_F(cli_train, WithoutDropoutTheMaskIsAllTrueAndTheSeedIsIgnored) {
  const TrainCase c = kBase;
  const auto p = [this](const std::string& n) { return path(n); };
  const Data x = make_data(c);
  const std::vector<std::string> a = write_files(c, x, p);
  Result r = cli(with_flags(a, {"--dropout-mask", path("keep.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  const sdpa::io::NpyArray keep = sdpa::io::read_npy(path("keep.npy"));
  ASSERT_EQ(keep.dtype, DType::boolean);
  EXPECT_EQ(keep.shape, (std::vector<std::int64_t>{c.b, c.h, c.n_q, c.n_kv}));
  EXPECT_EQ(std::count(keep.as<bool>(), keep.as<bool>() + keep.numel(), true), keep.numel());
  r = cli(with_flags(a, {"--seed", "12345", "--dropout-offset", "99999999999", "--out", path("o_seed.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(same_bytes(path("o_seed.npy"), path("o.npy")));
  r = cli(with_flags(a, {"--dropout", "0", "--seed", "12345", "--out", path("o_zero.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(same_bytes(path("o_zero.npy"), path("o.npy")));
}

// ---------------------------------------------------------------------------
// Packed batches

TEST_F(cli_train, PackedForwardAndBackwardMatchTheLibrary) {
  const std::int64_t h = 4, h_kv = 2, d = 8, dv = 5, tq = 10, tk = 20;
  std::vector<std::int32_t> cu_q = {0, 3, 3, 10}, cu_k = {0, 5, 9, 20};
  const std::vector<float> q = sdpa::test::randn(tq * h * d, 1), k = sdpa::test::randn(tk * h_kv * d, 2),
                           v = sdpa::test::randn(tk * h_kv * dv, 3), d_o = sdpa::test::randn(tq * h * dv, 4);
  const std::vector<float> sinks = {0.5f, -1.0f, 0.0f, 2.0f}, slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  write(path("q.npy"), {tq, h, d}, q);
  write(path("k.npy"), {tk, h_kv, d}, k);
  write(path("v.npy"), {tk, h_kv, dv}, v);
  write(path("do.npy"), {tq, h, dv}, d_o);
  write(path("sinks.npy"), {h}, sinks);
  write(path("slopes.npy"), {h}, slopes);
  sdpa::io::write_npy(path("cq.npy"), DType::i32, std::vector<std::int64_t>{4}, cu_q.data());
  sdpa::io::write_npy(path("ck.npy"), DType::i32, std::vector<std::int64_t>{4}, cu_k.data());
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "fast");
    std::vector<std::string> a = {"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                  "--cu-seqlens-q", path("cq.npy"), "--cu-seqlens-k", path("ck.npy"), "--causal",
                                  "--sinks", path("sinks.npy"), "--alibi-slopes", path("slopes.npy"),
                                  "--threads", "2", "--out", path("o.npy"), "--lse", path("lse.npy"),
                                  "--do", path("do.npy"), "--dq", path("dq.npy"), "--dk", path("dk.npy"),
                                  "--dv", path("dv.npy"), "--dsinks", path("dsinks.npy")};
    if (reference) a.push_back("--reference");
    const Result r = cli(a);
    ASSERT_EQ(r.code, 0) << describe(r);

    const auto check = [&]<class T>(T) {
      constexpr DType t = std::is_same_v<T, double> ? DType::f64 : DType::f32;
      std::vector<T> o(tq * h * dv), lse(h * tq), dq(q.size()), dk(k.size()), dv_(v.size()), ds(h);
      Options opt;
      opt.causal = true;
      opt.threads = 2;
      opt.sinks = TensorView::contiguous(sinks.data(), {h});
      opt.alibi_slopes = TensorView::contiguous(slopes.data(), {h});
      const TensorView qv = TensorView::contiguous(q.data(), {tq, h, d});
      const TensorView kv = TensorView::contiguous(k.data(), {tk, h_kv, d});
      const TensorView vv = TensorView::contiguous(v.data(), {tk, h_kv, dv});
      const TensorView ov = TensorView::contiguous(o.data(), t, {tq, h, dv});
      const TensorView lv = TensorView::contiguous(lse.data(), t, {h, tq});
      const TensorView cq = TensorView::contiguous(cu_q.data(), DType::i32, {4});
      const TensorView ck = TensorView::contiguous(cu_k.data(), DType::i32, {4});
      opt.lse = lv;
      sdpa::attention_varlen(qv, kv, vv, ov, cq, ck, opt, -1, -1, reference);
      opt.lse = {};
      sdpa::Gradients g;
      g.dq = TensorView::contiguous(dq.data(), t, {tq, h, d});
      g.dk = TensorView::contiguous(dk.data(), t, {tk, h_kv, d});
      g.dv = TensorView::contiguous(dv_.data(), t, {tk, h_kv, dv});
      g.dsinks = TensorView::contiguous(ds.data(), t, {h});
      sdpa::attention_varlen_backward(qv, kv, vv, ov, lv, TensorView::contiguous(d_o.data(), {tq, h, dv}), g, cq, ck,
                                      opt, -1, -1, reference);
      expect_file_equals(path("o.npy"), {tq, h, dv}, o);
      expect_file_equals(path("lse.npy"), {h, tq}, lse);
      expect_file_equals(path("dq.npy"), {tq, h, d}, dq);
      expect_file_equals(path("dk.npy"), {tk, h_kv, d}, dk);
      expect_file_equals(path("dv.npy"), {tk, h_kv, dv}, dv_);
      expect_file_equals(path("dsinks.npy"), {h}, ds);
    };
    if (reference) {
      check(0.0);
    } else {
      check(0.0f);
    }
  }
  EXPECT_THAT(tmp_leftovers(), IsEmpty());
}

// ---------------------------------------------------------------------------
// Exit codes and messages

class TrainErrors : public CliTrainTest {
 protected:
  void SetUp() override {
    CliTrainTest::SetUp();
    write(path("q.npy"), {2, 4, 6, 8}, sdpa::test::randn(2 * 4 * 6 * 8, 1));
    write(path("k.npy"), {2, 2, 5, 8}, sdpa::test::randn(2 * 2 * 5 * 8, 2));
    write(path("v.npy"), {2, 2, 5, 3}, sdpa::test::randn(2 * 2 * 5 * 3, 3));
    write(path("do.npy"), {2, 4, 6, 3}, sdpa::test::randn(2 * 4 * 6 * 3, 4));
    write(path("sinks.npy"), {4}, {0.1f, 0.2f, 0.3f, 0.4f});
    write(path("slopes.npy"), {4}, {0.5f, 0.25f, 0.125f, 0.0625f});
    std::vector<std::uint8_t> keep(5, 1);
    sdpa::io::write_npy(path("mask.npy"), DType::boolean, std::vector<std::int64_t>{5}, keep.data());
  }
  std::vector<std::string> args(const std::vector<std::string>& more = {}) const {
    return joined({"run", "--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--out", path("o.npy")},
                  more);
  }
  std::vector<std::string> backward(const std::vector<std::string>& more = {}) const {
    return with_flags(args({"--lse", path("lse.npy"), "--do", path("do.npy"), "--dq", path("dq.npy"), "--dk",
                            path("dk.npy"), "--dv", path("dv.npy")}),
                      more);
  }
  // The run's own outputs: none may exist after a failing run.
  void expect_no_outputs() const {
    for (const char* n : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "dsinks.npy", "keep.npy"})
      EXPECT_FALSE(fs::exists(path(n))) << n;
    EXPECT_THAT(tmp_leftovers(), IsEmpty());
  }
  // An error: exit `code`, one line on stderr containing each of `names`, no output file.
  Result expect_error(const std::vector<std::string>& a, const std::vector<std::string>& names, int code) const {
    const Result r = cli(a);
    EXPECT_EQ(r.code, code) << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& n : names) EXPECT_THAT(r.err, HasSubstr(n));
    expect_no_outputs();
    return r;
  }
};

using cli_train_errors = TrainErrors;

TEST_F(cli_train_errors, TheFixtureRunsForwardCleanly) {
  const Result r = cli(args({"--mask", path("mask.npy"), "--sinks", path("sinks.npy"), "--alibi-slopes",
                             path("slopes.npy"), "--causal", "--align", "top-left"}));
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::exists(path("o.npy")));
}

TEST_F(cli_train_errors, TheFixtureRunsBackwardCleanly) {
  const Result r = cli(backward({"--sinks", path("sinks.npy"), "--dsinks", path("dsinks.npy")}));
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* n : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "dsinks.npy"})
    EXPECT_TRUE(fs::exists(path(n))) << n;
}

// The forward's lse is kept for the backward whether or not --lse writes it.
TEST_F(cli_train_errors, TheBackwardNeedsNoLseFile) {
  std::vector<std::string> a = backward();
  ASSERT_EQ(cli(a).code, 0);
  for (const char* n : {"dq", "dk", "dv"}) fs::rename(path(std::string(n) + ".npy"), path(std::string(n) + "_1.npy"));
  fs::remove(path("lse.npy"));
  const auto lse = std::find(a.begin(), a.end(), "--lse");
  a.erase(lse, lse + 2);
  const Result r = cli(a);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_FALSE(fs::exists(path("lse.npy")));
  EXPECT_THAT(r.out, Not(HasSubstr("--lse")));
  for (const char* n : {"dq", "dk", "dv"})
    EXPECT_TRUE(same_bytes(path(std::string(n) + ".npy"), path(std::string(n) + "_1.npy"))) << n;
}

TEST_F(cli_train_errors, TheBackwardsFlagsComeTogether) {
  // --do without --dq: the missing flag is named.
  Result r = expect_error(args({"--do", path("do.npy"), "--dk", path("dk.npy"), "--dv", path("dv.npy")}),
                          {"--do", "missing --dq"}, 2);
  EXPECT_THAT(r.err, Not(HasSubstr("missing --dq, --dk")));
  expect_error(args({"--do", path("do.npy")}), {"--do", "missing --dq, --dk, --dv"}, 2);
  // The gradients without --do.
  expect_error(args({"--dq", path("dq.npy"), "--dk", path("dk.npy"), "--dv", path("dv.npy")}),
               {"--dq", "missing --do"}, 2);
  expect_error(args({"--dv", path("dv.npy")}), {"--dv", "missing --do, --dq, --dk"}, 2);
  // --dsinks needs --sinks, and the backward.
  expect_error(backward({"--dsinks", path("dsinks.npy")}), {"--dsinks", "--sinks"}, 2);
  expect_error(args({"--sinks", path("sinks.npy"), "--dsinks", path("dsinks.npy")}), {"--dsinks", "--do"}, 2);
}

TEST_F(cli_train_errors, BadFlagValuesAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--align", "sideways"}, {"--align", ""},          {"--align", "bottom_right"}, {"--dropout", "1"},
      {"--dropout", "-0.5"},   {"--dropout", "1.5"},     {"--dropout", "nan"},        {"--dropout", "x"},
      {"--seed", "-1"},        {"--seed", "seven"},      {"--seed", "18446744073709551616"},
      {"--dropout-offset", "-3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0] + " " + c[1]);
    expect_error(args(c), {c[0]}, 2);
  }
  // The offset's range is checked with dropout on.
  expect_error(args({"--dropout", "0.1", "--dropout-offset", "4294967296"}), {"--dropout-offset"}, 2);
  // The library's rule comes back under the flag.
  const Result r = expect_error(args({"--dropout", "1"}), {"sdpa run: --dropout: expected a probability in [0, 1)"}, 2);
  (void)r;
}

TEST_F(cli_train_errors, BadModifierFilesNameTheirFlags) {
  // Not broadcastable: 3 against H = 4.
  std::vector<std::uint8_t> m(3 * 5, 1);
  sdpa::io::write_npy(path("bad_mask.npy"), DType::boolean, std::vector<std::int64_t>{3, 1, 5}, m.data());
  expect_error(args({"--mask", path("bad_mask.npy")}), {"--mask " + path("bad_mask.npy") + ": expected"}, 2);
  std::vector<std::int32_t> ints(5, 1);
  sdpa::io::write_npy(path("int_mask.npy"), DType::i32, std::vector<std::int64_t>{5}, ints.data());
  expect_error(args({"--mask", path("int_mask.npy")}), {"--mask " + path("int_mask.npy"), "int32"}, 2);
  write(path("slopes3.npy"), {3}, {1, 2, 3});
  expect_error(args({"--alibi-slopes", path("slopes3.npy")}), {"--alibi-slopes " + path("slopes3.npy")}, 2);
  write(path("sinks41.npy"), {4, 1}, {1, 2, 3, 4});
  expect_error(args({"--sinks", path("sinks41.npy")}), {"--sinks " + path("sinks41.npy")}, 2);
  // A file that does not exist: a failure naming the flag.
  expect_error(args({"--mask", path("none.npy")}), {"--mask", "none.npy"}, 1);
  expect_error(args({"--sinks", path("none.npy")}), {"--sinks", "none.npy"}, 1);
}

TEST_F(cli_train_errors, ABadGradientOfOIsAUsageErrorNamingDo) {
  write(path("do_bad.npy"), {2, 4, 6, 4}, std::vector<float>(2 * 4 * 6 * 4, 1.0f));  // dv = 4, O has 3
  auto a = backward();
  std::replace(a.begin(), a.end(), path("do.npy"), path("do_bad.npy"));
  expect_error(a, {"--do " + path("do_bad.npy") + ": expected"}, 2);
  write(path("do_rank3.npy"), {4, 6, 3}, std::vector<float>(4 * 6 * 3, 1.0f));
  a = backward();
  std::replace(a.begin(), a.end(), path("do.npy"), path("do_rank3.npy"));
  expect_error(a, {"--do " + path("do_rank3.npy"), "rank 4"}, 2);
  a = backward();
  std::replace(a.begin(), a.end(), path("do.npy"), path("missing.npy"));
  expect_error(a, {"--do", "missing.npy"}, 1);
}

TEST_F(cli_train_errors, AnOutputOnAnInputIsRefused) {
  const std::string q0 = slurp(path("q.npy")), do0 = slurp(path("do.npy")), mask0 = slurp(path("mask.npy")),
                    sinks0 = slurp(path("sinks.npy"));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {backward({"--dq", path("q.npy")}), "--dq"},
      {backward({"--dk", path("do.npy")}), "--dk"},
      {backward({"--dv", path("./mask.npy"), "--mask", path("mask.npy")}), "--dv"},
      {backward({"--sinks", path("sinks.npy"), "--dsinks", path("sinks.npy")}), "--dsinks"},
      {args({"--dropout-mask", path("k.npy")}), "--dropout-mask"},
      {args({"--lse", path("slopes.npy"), "--alibi-slopes", path("slopes.npy")}), "--lse"},
  };
  for (const auto& [a, flag] : cases) {
    SCOPED_TRACE(flag);
    const Result r = cli(a);
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_THAT(r.err, HasSubstr(flag));
    EXPECT_THAT(r.err, HasSubstr("input"));
  }
  // Two outputs on one file.
  const Result r = cli(backward({"--dk", path("dq.npy")}));
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_THAT(r.err, HasSubstr("--dq and --dk name the same file"));
  EXPECT_TRUE(slurp(path("q.npy")) == q0) << "q.npy changed";
  EXPECT_TRUE(slurp(path("do.npy")) == do0) << "do.npy changed";
  EXPECT_TRUE(slurp(path("mask.npy")) == mask0) << "mask.npy changed";
  EXPECT_TRUE(slurp(path("sinks.npy")) == sinks0) << "sinks.npy changed";
  expect_no_outputs();
}

TEST_F(cli_train_errors, AFailingRunLeavesNoOutputs) {
  // An output in a folder that does not exist: found before anything is computed.
  expect_error(backward({"--dk", path("no/such/dir/dk.npy")}), {"--dk"}, 1);
  expect_error(args({"--dropout-mask", path("no/such/dir/keep.npy")}), {"--dropout-mask"}, 1);
  // A forward that fails (a bad mask) writes none of the backward's outputs either.
  write(path("sinks5.npy"), {5}, {1, 2, 3, 4, 5});
  expect_error(backward({"--sinks", path("sinks5.npy"), "--dsinks", path("dsinks.npy")}), {"--sinks"}, 2);
}

TEST_F(cli_train_errors, ALastOutputThatCannotBeWrittenLeavesNoneOfTheOthers) {
  // The name is too long for the file system: found only when it is written,
  // after the forward and the backward ran.
  const std::string too_long = path(std::string(300, 'x') + ".npy");
  expect_error(backward({"--dv", too_long}), {"--dv"}, 1);
  expect_error(backward({"--sinks", path("sinks.npy"), "--dsinks", too_long}), {"--dsinks"}, 1);
}

TEST_F(cli_train_errors, ExistingOutputsAreLeftUnchangedByAFailingBackward) {
  for (const char* n : {"o.npy", "dq.npy"}) std::ofstream(path(n), std::ios::binary) << "previous";
  write(path("do_bad.npy"), {2, 4, 6, 4}, std::vector<float>(2 * 4 * 6 * 4, 1.0f));
  auto a = backward();
  std::replace(a.begin(), a.end(), path("do.npy"), path("do_bad.npy"));
  const Result r = cli(a);
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(slurp(path("o.npy")), "previous");
  EXPECT_EQ(slurp(path("dq.npy")), "previous");
  EXPECT_FALSE(fs::exists(path("lse.npy")));
  EXPECT_THAT(tmp_leftovers(), IsEmpty());
}

TEST_F(cli_train_errors, ADropoutMaskLargerThanTheLibraryLimit) {
  // 16385² > 2^28 keep decisions, from three inputs of 64 KiB each.
  for (const char* n : {"q.npy", "k.npy", "v.npy"}) write(path(n), {16385, 1}, std::vector<float>(16385, 0.5f));
  const Result r = expect_error(args({"--dropout", "0.1", "--dropout-mask", path("keep.npy")}),
                                {"--dropout-mask " + path("keep.npy"), "268435456"}, 1);
  EXPECT_THAT(r.err, Not(HasSubstr("bad_alloc")));
}

TEST_F(cli_train_errors, PackedRunsRefuseTheDenseOnlyArrays) {
  std::vector<std::int32_t> cu = {0, 6};
  sdpa::io::write_npy(path("cu.npy"), DType::i32, std::vector<std::int64_t>{2}, cu.data());
  write(path("q3.npy"), {6, 4, 8}, std::vector<float>(6 * 4 * 8, 0.5f));
  for (const auto& [flag, file] : {std::pair{"--mask", "mask.npy"}, std::pair{"--dropout-mask", "keep.npy"}}) {
    const Result r = cli({"run", "--q", path("q3.npy"), "--k", path("q3.npy"), "--v", path("q3.npy"),
                          "--cu-seqlens-q", path("cu.npy"), "--cu-seqlens-k", path("cu.npy"), "--out", path("o.npy"),
                          flag, path(file)});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_THAT(r.err, HasSubstr(std::string(flag) + ": not available with packed sequences"));
  }
  expect_no_outputs();
}

// ---------------------------------------------------------------------------
// --help

TEST_F(cli_train, HelpDocumentsEveryNewFlag) {
  const Result r = cli({"run", "--help"});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* flag : {"--mask", "--alibi-slopes", "--sinks", "--align", "bottom-right|top-left", "--dropout ",
                           "--seed", "--dropout-offset", "--dropout-mask", "--do ", "--dq", "--dk", "--dv",
                           "--dsinks"})
    EXPECT_THAT(r.out, HasSubstr(flag));
}

}  // namespace
