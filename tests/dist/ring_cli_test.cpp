// `mpirun -np P sdpa run --ring` against `sdpa run` in one process: the same
// flags and files, outputs equal within the fast path's tolerance against
// the oracle (tolerance_o for O and lse, 2e-4·max(1, max|g|) for gradients,
// as in ring_test.cpp); and the flags the ring refuses, with their exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/npy.h"
#include "support/cli_fixture.h"
#include "support/problem.h"

namespace sdpa::test {
namespace {

class RingCli : public CliFixture {
 protected:
  RingCli() : CliFixture("sdpa_ring_cli_") {}

  // mpirun -np `ranks` sdpa ARGS, output captured.
  Result mpirun(int ranks, const std::vector<std::string>& args) const {
    std::string cmd = shell_quote(SDPA_MPIEXEC) + " --oversubscribe --allow-run-as-root --mca btl self,vader,tcp -np " +
                      std::to_string(ranks) + " " + shell_quote(SDPA_CLI);
    for (const std::string& a : args) {
      cmd += ' ';
      cmd += shell_quote(a);
    }
    cmd += " >" + shell_quote(path("capture/stdout")) + " 2>" + shell_quote(path("capture/stderr")) + " </dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(path("capture/stdout"));
    r.err = slurp(path("capture/stderr"));
    return r;
  }

  void save(const std::string& name, const std::vector<std::int64_t>& shape, std::uint64_t seed) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    const std::vector<float> x = randn(static_cast<std::size_t>(n), seed);
    io::write_npy(path(name), DType::f32, shape, x.data());
  }

  static std::vector<float> load(const std::string& p) {
    const io::NpyArray a = io::read_npy(p);
    std::vector<float> x(static_cast<std::size_t>(a.numel()));
    std::memcpy(x.data(), a.data.data(), x.size() * sizeof(float));
    return x;
  }

  // Runs the flags once in one process and once on the ring; compares every output.
  void compare(int ranks, const std::vector<std::string>& flags, const std::vector<std::string>& outputs,
               const Problem& pb, bool zigzag) {
    const auto with_outputs = [&](const std::string& suffix, bool ring) {
      std::vector<std::string> args = {"run"};
      if (ring) args.push_back("--ring");
      if (ring && zigzag) args.push_back("--zigzag");
      args.insert(args.end(), flags.begin(), flags.end());
      for (const std::string& o : outputs) {
        args.push_back("--" + o);
        args.push_back(path(o + suffix + ".npy"));
      }
      return args;
    };
    const Result single = cli(with_outputs("_single", false));
    ASSERT_EQ(single.code, 0) << single.err;
    const Result ring = mpirun(ranks, with_outputs("_ring", true));
    ASSERT_EQ(ring.code, 0) << ring.err << ring.out;
    EXPECT_NE(ring.out.find("ring of " + std::to_string(ranks) + " ranks"), std::string::npos) << ring.out;
    for (const std::string& o : outputs) {
      const std::vector<float> want = load(path(o + "_single.npy")), got = load(path(o + "_ring.npy"));
      ASSERT_EQ(want.size(), got.size()) << o;
      double err = 0, big = 1;
      for (std::size_t i = 0; i < want.size(); ++i) {
        big = std::max(big, std::abs(double{want[i]}));
        if (want[i] != got[i]) err = std::max(err, std::abs(double{want[i]} - got[i]));
      }
      const double tol = o == "out" ? tolerance_o(pb, 5, 5, 5) : o == "lse" ? tolerance_lse(pb, 5, 5) : 2e-4 * big;
      EXPECT_LE(err, tol) << "--" << o << " with " << ranks << " ranks";
    }
  }
};

TEST_F(RingCli, ForwardAndBackwardEqualOneProcess) {
  save("q.npy", {2, 4, 77, 16}, 1);
  save("k.npy", {2, 2, 77, 16}, 2);
  save("v.npy", {2, 2, 77, 16}, 3);
  save("do.npy", {2, 4, 77, 16}, 4);
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  io::write_npy(path("alibi.npy"), DType::f32, std::vector<std::int64_t>{4}, slopes.data());
  Problem pb;
  pb.b = 2, pb.h = 4, pb.h_kv = 2, pb.n_q = pb.n_kv = 77, pb.d = pb.dv = 16;
  const std::vector<std::string> flags = {"--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"),
                                          "--do", path("do.npy"), "--causal", "--window-left", "30",
                                          "--alibi-slopes", path("alibi.npy"), "--threads", "1"};
  compare(2, flags, {"out", "lse", "dq", "dk", "dv"}, pb, false);
  compare(3, flags, {"out", "lse", "dq", "dk", "dv"}, pb, true);
}

TEST_F(RingCli, BshdLayoutAndSinks) {
  save("q.npy", {1, 50, 2, 8}, 5);  // [B, N, H, d]
  save("k.npy", {1, 50, 1, 8}, 6);
  save("v.npy", {1, 50, 1, 8}, 7);
  save("do.npy", {1, 50, 2, 8}, 8);
  const std::vector<float> sinks = {0.3f, -1.0f};
  io::write_npy(path("sinks.npy"), DType::f32, std::vector<std::int64_t>{2}, sinks.data());
  Problem pb;
  pb.b = 1, pb.h = 2, pb.h_kv = 1, pb.n_q = pb.n_kv = 50, pb.d = pb.dv = 8;
  compare(2,
          {"--q", path("q.npy"), "--k", path("k.npy"), "--v", path("v.npy"), "--do", path("do.npy"), "--layout",
           "bshd", "--sinks", path("sinks.npy"), "--causal"},
          {"out", "lse", "dq", "dk", "dv", "dsinks"}, pb, true);
}

TEST_F(RingCli, RefusedFlagsAndBadFiles) {
  save("q.npy", {1, 1, 20, 8}, 1);
  const std::vector<std::string> qkv = {"--q", path("q.npy"), "--k", path("q.npy"), "--v", path("q.npy")};
  const auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"run"};
    a.insert(a.end(), qkv.begin(), qkv.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result r = cli(args({"--zigzag", "--out", path("o.npy")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--zigzag: expected it with --ring"), std::string::npos) << r.err;
  r = mpirun(2, args({"--ring", "--reference", "--out", path("o.npy")}));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--reference: not available with --ring"), std::string::npos) << r.err;
  // Rank 0 cannot read --v: every rank stops, nothing is written.
  r = mpirun(2, {"run", "--ring", "--q", path("q.npy"), "--k", path("q.npy"), "--v", path("missing.npy"), "--out",
                 path("o.npy")});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--v"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("o.npy")));
  // A shape the library refuses (K's d differs), reported in its words, on every rank.
  save("k8.npy", {1, 1, 20, 4}, 2);
  r = mpirun(2, {"run", "--ring", "--q", path("q.npy"), "--k", path("k8.npy"), "--v", path("q.npy"), "--out",
                 path("o.npy")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--k"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("o.npy")));
}

}  // namespace
}  // namespace sdpa::test
