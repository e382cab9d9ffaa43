// The explorer's JSON API (apps/sdpa/explorer_api.h), called directly, and
// `sdpa serve` / `sdpa stats` run as processes: the HTTP wiring, bad input,
// the port-in-use message, Ctrl-C, and the atomically written SVG.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "explorer_api.h"
#include "teaching_math.h"

namespace ex = sdpa::explorer;
namespace teach = sdpa::teaching;
using json = nlohmann::json;

namespace {

json call(const std::string& endpoint, const json& body, int want_status = 200) {
  const ex::Response r = ex::handle("POST", "/api/" + endpoint, body.dump());
  EXPECT_EQ(r.status, want_status) << endpoint << " " << body.dump() << " -> " << r.body;
  return json::parse(r.body);
}

// ---------------------------------------------------------------- softmax arithmetic

TEST(ExplorerMath, SoftmaxSumsToOneAndMatchesLogSoftmax) {
  const std::vector<double> s = {40, 12, 8};
  const std::vector<double> p = teach::softmax(s), lp = teach::log_softmax(s);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-15);
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(std::exp(lp[i]), p[i], 1e-15);
  // log-probabilities keep the order even where the probabilities underflow.
  const std::vector<double> far = {1000, -1000, -999};
  const std::vector<double> lfar = teach::log_softmax(far);
  EXPECT_EQ(teach::softmax(far)[1], 0.0);
  EXPECT_LT(lfar[1], lfar[2]);
  EXPECT_EQ(teach::ranks(lfar), (std::vector<int>{1, 3, 2}));
}

TEST(ExplorerMath, EntropyAndJacobian) {
  const std::vector<double> uniform(8, 1.0 / 8), one_hot = {1, 0, 0, 0};
  EXPECT_NEAR(teach::entropy(uniform), std::log(8.0), 1e-12);
  EXPECT_EQ(teach::entropy(one_hot), 0.0);
  EXPECT_EQ(teach::jacobian_norm(one_hot), 0.0);  // saturated: no gradient at all
  // diag(p) − p·pᵀ for p uniform over n: n(1/n − 1/n²)² + n(n−1)/n⁴.
  const double n = 8, want = std::sqrt(n * std::pow(1 / n - 1 / (n * n), 2) + n * (n - 1) / std::pow(n, 4));
  EXPECT_NEAR(teach::jacobian_norm(uniform), want, 1e-12);
}

TEST(ExplorerMath, RanksShareTies) {
  EXPECT_EQ(teach::ranks(std::vector<double>{3, 1, 3, 2}), (std::vector<int>{1, 4, 1, 3}));
}

// ---------------------------------------------------------------- endpoints

TEST(ExplorerApi, ScaleWorksTheLessonsExample) {
  const json r = call("scale", {{"score", 40}, {"dk", 64}});
  EXPECT_EQ(r["sqrt_dk"], 8.0);
  EXPECT_EQ(r["scaled"], 5.0);
  EXPECT_EQ(r["scale"], 0.125);
  EXPECT_EQ(r["sqrt_is_integer"], true);
  const json q = call("scale", {{"score", 40}, {"dk", 50}});
  EXPECT_EQ(q["scaled"].get<double>(), 40 / std::sqrt(50.0));
  EXPECT_EQ(q["sqrt_is_integer"], false);
  EXPECT_EQ(call("scale", json::object())["scaled"], 5.0);  // defaults: 40 and 64
}

TEST(ExplorerApi, StoryKeepsTheOrderAndSoftensTheWeights) {
  const json r = call("softmax", {{"labels", {"Tom", "New York", "lives"}}, {"scores", {40, 12, 8}}, {"dk", 64}});
  EXPECT_EQ(r["scaled_scores"], json({5.0, 1.5, 1.0}));
  EXPECT_EQ(r["same_order"], true);
  EXPECT_EQ(r["raw"]["ranks"], json({1, 2, 3}));
  EXPECT_EQ(r["scaled"]["ranks"], json({1, 2, 3}));
  EXPECT_GT(r["raw"]["probs"][0].get<double>(), 1 - 1e-11);  // Tom takes everything
  const double z = std::exp(5.0) + std::exp(1.5) + std::exp(1.0);
  EXPECT_NEAR(r["scaled"]["probs"][0].get<double>(), std::exp(5.0) / z, 1e-12);
  EXPECT_NEAR(r["scaled"]["probs"][2].get<double>(), std::exp(1.0) / z, 1e-12);
  EXPECT_GT(r["scaled"]["entropy"].get<double>(), r["raw"]["entropy"].get<double>());
}

TEST(ExplorerApi, GrowthSpreadIsRootDk) {
  for (int dk : {1, 16, 256, 1024}) {
    const json r = call("growth", {{"dk", dk}, {"seed", 3}});
    EXPECT_NEAR(r["std_raw"].get<double>() / std::sqrt(double(dk)), 1.0, 0.08) << dk;
    EXPECT_NEAR(r["std_scaled"].get<double>(), 1.0, 0.08) << dk;
    const json& h = r["histogram"];
    long total = h["below"]["raw"].get<long>() + h["above"]["raw"].get<long>();
    for (const json& c : h["raw"]) total += c.get<long>();
    EXPECT_EQ(total, h["samples"].get<long>());
    EXPECT_EQ(h["samples"].get<long>(), r["keys"].get<long>() * r["trials"].get<long>());
  }
  const json big = call("growth", {{"dk", 1024}});
  EXPECT_GT(big["raw"]["max_weight"].get<double>(), 0.9);    // saturated
  EXPECT_LT(big["raw"]["entropy"].get<double>(), 0.3);
  EXPECT_LT(big["scaled"]["max_weight"].get<double>(), 0.4);
  EXPECT_GT(big["scaled"]["entropy"].get<double>(), 2.0);
  EXPECT_LT(big["raw"]["grad_norm"].get<double>(), 0.5 * big["scaled"]["grad_norm"].get<double>());
}

TEST(ExplorerApi, GrowthIsDeterministicAndMatchesTheCurve) {
  const teach::GrowthConfig cfg{16, 64, 9};
  const teach::GrowthPoint a = teach::growth_point(128, cfg), b = teach::growth_point(128, cfg);
  EXPECT_EQ(a.std_raw, b.std_raw);
  EXPECT_EQ(a.raw.entropy, b.raw.entropy);
  const std::vector<teach::GrowthPoint> curve = teach::growth_curve(128, cfg);
  ASSERT_EQ(curve.size(), 8u);  // 1, 2, ..., 128
  EXPECT_EQ(curve.back().std_raw, a.std_raw);
  EXPECT_EQ(curve.front().raw.entropy, curve.front().scaled.entropy);  // d_k = 1: nothing to scale
  EXPECT_EQ(teach::growth_dks(100), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100}));
  const json c = call("curve", {{"seed", 9}, {"keys", 16}, {"trials", 64}, {"dk_max", 128}});
  ASSERT_EQ(c["points"].size(), 8u);
  EXPECT_EQ(c["points"][7]["std_raw"].get<double>(), a.std_raw);
}

// Without scaling the gradient first rises with d_k, then falls as the softmax saturates:
// the curve endpoint names the peak, and the uniform weight for its largest-weight panel.
TEST(ExplorerApi, CurveNamesTheUnscaledGradientsPeak) {
  std::vector<teach::GrowthPoint> pts(4);
  const double grads[] = {0.2, 0.35, 0.3, 0.1};
  for (int i = 0; i < 4; ++i) {
    pts[static_cast<std::size_t>(i)].dk = 1 << i;
    pts[static_cast<std::size_t>(i)].raw.grad_norm = grads[i];
  }
  EXPECT_EQ(teach::raw_gradient_peak(pts), 2);
  EXPECT_EQ(teach::raw_gradient_peak({}), 0);
  const json c = call("curve", {{"seed", 1}});
  const int peak = c["raw_grad_peak"];
  double best = -1;
  int want = 0;
  for (const json& p : c["points"]) {
    if (p["raw"]["grad_norm"].get<double>() > best) {
      best = p["raw"]["grad_norm"].get<double>();
      want = p["dk"];
    }
  }
  EXPECT_EQ(peak, want);
  EXPECT_GT(peak, 1);      // it rises first ...
  EXPECT_LT(peak, 1024);   // ... and falls after
  EXPECT_EQ(c["uniform_weight"].get<double>(), 1.0 / c["keys"].get<double>());
}

// softmax(scale·Q·Kᵀ) and P·V in double, from the float32 inputs the API reports.
struct Expected {
  std::vector<std::vector<double>> p, o;
};
Expected expected_attention(const json& r, double scale, bool causal) {
  const std::size_t n = r["n"], d = r["d"], dv = r["dv"];
  Expected e;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> s;
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += r["q"][i][c].get<double>() * r["k"][j][c].get<double>();
      s.push_back(causal && j > i ? -INFINITY : scale * dot);
    }
    std::vector<double> p = teach::softmax(s);
    std::vector<double> o(dv, 0.0);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < dv; ++c) o[c] += p[j] * r["v"][j][c].get<double>();
    }
    e.p.push_back(p);
    e.o.push_back(o);
  }
  return e;
}

void expect_map_matches(const json& r) {
  const bool causal = r["causal"];
  const std::size_t n = r["n"], dv = r["dv"];
  for (const char* side : {"scaled", "unscaled"}) {
    const json& s = r[side];
    const Expected e = expected_attention(r, s["scale"].get<double>(), causal);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(s["row_sums"][i].get<double>(), 1.0, 1e-5) << side << " row " << i;
      for (std::size_t j = 0; j < n; ++j) {
        EXPECT_NEAR(s["probs"][i][j].get<double>(), e.p[i][j], 2e-5) << side << " " << i << "," << j;
        if (causal && j > i) {
          EXPECT_EQ(s["probs"][i][j].get<double>(), 0.0);
        }
      }
      for (std::size_t c = 0; c < dv; ++c) EXPECT_NEAR(s["out"][i][c].get<double>(), e.o[i][c], 1e-4) << side;
    }
  }
}

TEST(ExplorerApi, AttentionMapIsTheLibrarysSoftmax) {
  for (bool causal : {false, true}) {
    const json r = call("attention", {{"tokens", {"Tom", "lives", "in", "New York"}}, {"d", 16}, {"dv", 4},
                                      {"seed", 7}, {"causal", causal}});
    EXPECT_EQ(r["n"], 4);
    EXPECT_EQ(r["scaled"]["scale"], 0.25);
    EXPECT_EQ(r["unscaled"]["scale"], 1.0);
    expect_map_matches(r);
    // Without scaling the rows are sharper.
    EXPECT_LT(r["unscaled"]["mean_entropy"].get<double>(), r["scaled"]["mean_entropy"].get<double>());
  }
  // The same seed gives the same vectors.
  const json a = call("attention", {{"tokens", {"a", "b"}}, {"seed", 11}});
  const json b = call("attention", {{"tokens", {"a", "b"}}, {"seed", 11}});
  EXPECT_EQ(a["q"], b["q"]);
  EXPECT_NE(a["q"], call("attention", {{"tokens", {"a", "b"}}, {"seed", 12}})["q"]);
}

TEST(ExplorerApi, AttentionMapTakesEnteredVectors) {
  const json req = {{"tokens", {"x", "y", "z"}},
                    {"q", {{1, 0}, {0, 1}, {1, 1}}},
                    {"k", {{2, 0}, {0, 2}, {1, -1}}},
                    {"v", {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}},
                    {"causal", true}};
  const json r = call("attention", req);
  EXPECT_EQ(r["entered"], true);
  EXPECT_EQ(r["d"], 2);
  EXPECT_EQ(r["dv"], 3);
  EXPECT_EQ(r["k"][2][1], -1.0);
  EXPECT_EQ(r["scaled"]["probs"][0], json({1.0, 0.0, 0.0}));  // the first token sees only itself
  expect_map_matches(r);
}

// The page's real head (web/minilm-head.json, from all-MiniLM-L6-v2): value rows as long as
// the head (32), more than /api/attention's d_v limit; both scales computed by the library.
TEST(ExplorerApi, RealHeadFromTheShippedFile) {
  const json file = json::parse(std::string(ex::find_asset("/minilm-head.json")->body));
  const std::size_t d = file["d"];
  EXPECT_EQ(d, 32u);
  ASSERT_GE(file["heads"].size(), 2u);
  const json& head = file["heads"][0];
  ASSERT_EQ(head["v"][0].size(), d);
  const json r = call("head", {{"tokens", file["tokens"]}, {"q", head["q"]}, {"k", head["k"]}, {"v", head["v"]}});
  EXPECT_EQ(r["d"], d);
  EXPECT_EQ(r["dv"], d);
  EXPECT_EQ(r["n"], file["tokens"].size());
  EXPECT_NEAR(r["scaled"]["scale"].get<double>(), 1 / std::sqrt(32.0), 1e-12);
  expect_map_matches(r);
  // Without the scaling the real head is sharper: lower entropy on average.
  EXPECT_LT(r["unscaled"]["mean_entropy"].get<double>(), r["scaled"]["mean_entropy"].get<double>());
  // Q, K, V are required (no random fallback), and the fields are /api/head's own.
  const json missing = call("head", {{"tokens", {"a", "b"}}, {"q", {{1}, {2}}}}, 400);
  EXPECT_EQ(missing["field"], "k");
  const json unknown = call("head", {{"tokens", {"a"}}, {"seed", 3}}, 400);
  EXPECT_EQ(unknown["field"], "seed");
  json long_v = head["v"];
  long_v[0].push_back(1.0);
  const json ragged = call("head", {{"tokens", file["tokens"]}, {"q", head["q"]}, {"k", head["k"]}, {"v", long_v}}, 400);
  EXPECT_EQ(ragged["field"], "v");
}

TEST(ExplorerApi, MisconceptionsAreRefutedByTheNumbers) {
  const json r = call("misconceptions", {{"scores", {40, 12, 8}}, {"dk", 64}});
  EXPECT_EQ(r["order"]["same"], true);
  EXPECT_EQ(r["order"]["random_changed"], 0);
  EXPECT_EQ(r["order"]["random_winner_changed"], 0);
  EXPECT_EQ(r["learned"]["scale"], 0.125);
  for (const json& rec : r["learned"]["recovered"]) EXPECT_NEAR(rec["scale"].get<double>(), 0.125, 1e-4);
  EXPECT_EQ(r["learned"]["trainable_parameters"], 0);
  const json& big = r["big_dk"]["big"];
  EXPECT_EQ(big["dk"], 1024);
  EXPECT_LT(big["raw"]["entropy"].get<double>(), 0.3);
  EXPECT_GT(big["scaled"]["entropy"].get<double>(), 2.0);
  EXPECT_NEAR(r["flat"]["top_scaled"].get<double>(), std::exp(5.0) / (std::exp(5.0) + std::exp(1.5) + std::exp(1.0)),
              1e-12);
}

TEST(ExplorerApi, InfoNamesTheLimits) {
  const ex::Response r = ex::handle("GET", "/api/info", "");
  ASSERT_EQ(r.status, 200);
  const json info = json::parse(r.body);
  EXPECT_EQ(info["limits"]["dk"], json({1, 1024}));
  EXPECT_EQ(info["limits"]["body_bytes"], 65536);
  EXPECT_EQ(info["limits"]["work"], ex::kMaxWork);
  EXPECT_FALSE(info["isa"].get<std::string>().empty());
}

// ---------------------------------------------------------------- bad input

struct Bad {
  std::string endpoint;
  json body;
  std::string field;
};

TEST(ExplorerApi, BadInputIs400NamingTheField) {
  std::vector<std::string> many_tokens;
  for (int i = 0; i < 17; ++i) many_tokens.push_back(std::string("t").append(std::to_string(i)));
  const std::vector<Bad> cases = {
      {"scale", {{"dk", 0}}, "dk"},
      {"scale", {{"dk", 2000}}, "dk"},
      {"scale", {{"dk", 64.5}}, "dk"},
      {"scale", {{"dk", "64"}}, "dk"},
      {"scale", {{"score", 1e9}}, "score"},
      {"scale", {{"score", "forty"}}, "score"},
      {"scale", {{"dk", 64}, {"d_k", 64}}, "d_k"},
      {"softmax", {{"scores", json::array()}}, "scores"},
      {"softmax", {{"scores", {1, "x", 3}}}, "scores"},
      {"softmax", {{"scores", {1, 2, 3}}, {"labels", {"a"}}}, "labels"},
      {"softmax", {{"scores", {1, 2}}, {"labels", {"a", ""}}}, "labels"},
      {"softmax", {{"scores", {1, 2}}, {"labels", {"a", std::string(40, 'b')}}}, "labels"},
      {"softmax", {{"scores", {1, 2}}, {"labels", {"a", "b\nc"}}}, "labels"},
      {"growth", {{"dk", -1}}, "dk"},
      {"growth", {{"keys", 1}}, "keys"},
      {"growth", {{"trials", 1000000}}, "trials"},
      {"growth", {{"bins", 3}}, "bins"},
      {"growth", {{"seed", -1}}, "seed"},
      {"growth", {{"seed", 9007199254740992.0}}, "seed"},
      {"curve", {{"dk_max", 4096}}, "dk_max"},
      {"attention", {{"tokens", json::array()}}, "tokens"},
      {"attention", {{"tokens", many_tokens}}, "tokens"},
      {"attention", {{"tokens", {"a", 5}}}, "tokens"},
      {"attention", {{"tokens", {"a"}}, {"d", 0}}, "d"},
      {"attention", {{"tokens", {"a"}}, {"d", 257}}, "d"},
      {"attention", {{"tokens", {"a"}}, {"dv", 17}}, "dv"},
      {"attention", {{"tokens", {"a"}}, {"causal", 1}}, "causal"},
      {"attention", {{"tokens", {"a"}}, {"q", {{1}}}}, "k"},
      {"attention", {{"tokens", {"a", "b"}}, {"q", {{1}}}, {"k", {{1}, {1}}}, {"v", {{1}, {1}}}}, "q"},
      {"attention", {{"tokens", {"a", "b"}}, {"q", {{1}, {1, 2}}}, {"k", {{1}, {1}}}, {"v", {{1}, {1}}}}, "q"},
      {"attention", {{"tokens", {"a"}}, {"q", {{1, 2}}}, {"k", {{1}}}, {"v", {{1}}}}, "k"},
      {"attention", {{"tokens", {"a"}}, {"q", {{1}}}, {"k", {{1}}}, {"v", {{"x"}}}}, "v"},
      {"attention", {{"tokens", {"a"}}, {"q", {{1e6}}}, {"k", {{1}}}, {"v", {{1}}}}, "q"},
      {"attention", {{"tokens", {"a"}}, {"q", {{1, 2}}}, {"k", {{1, 2}}}, {"v", {{1}}}, {"d", 3}}, "q"},
      {"misconceptions", {{"scores", {1}}}, "scores"},
      {"misconceptions", {{"big_dk", 0}}, "big_dk"},
      {"growth", {{"dk", 1024}, {"trials", 2048}, {"keys", 64}, {"bins", 200}}, "trials"},
      {"growth", {{"dk", 1024}, {"trials", 257}, {"keys", 64}}, "trials"},
      {"curve", {{"keys", 64}}, "keys"},
      {"curve", {{"keys", 64}, {"trials", 2048}}, "trials"},
  };
  for (const Bad& c : cases) {
    const ex::Response r = ex::handle("POST", "/api/" + c.endpoint, c.body.dump());
    EXPECT_EQ(r.status, 400) << c.endpoint << " " << c.body.dump() << " -> " << r.body;
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object()) << r.body;
    EXPECT_EQ(e["field"], c.field) << c.endpoint << " " << c.body.dump() << " -> " << r.body;
    EXPECT_TRUE(e["error"].is_string() && !e["error"].get<std::string>().empty());
  }
  // The message says what was expected and what came.
  const json e = json::parse(ex::handle("POST", "/api/scale", R"({"dk": 2000})").body);
  EXPECT_EQ(e["error"], "dk: expected an integer in [1, 1024], got 2000");
}

// d_k·keys·trials random scores per request at most: the 47-byte request
// that kept `sdpa serve` busy for seconds is refused before any work.
TEST(ExplorerApi, WorkPerRequestIsBounded) {
  const auto start = std::chrono::steady_clock::now();
  const ex::Response r = ex::handle("POST", "/api/growth", R"({"dk":1024,"trials":2048,"keys":64,"bins":200})");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  ASSERT_EQ(r.status, 400) << r.body;
  const json e = json::parse(r.body);
  EXPECT_EQ(e["field"], "trials");
  EXPECT_NE(e["error"].get<std::string>().find("trials may be at most 256"), std::string::npos) << e["error"];
  // Exactly the limit: every d_k and key count at the default 256 trials.
  const json most = call("growth", {{"dk", ex::kMaxDk}, {"keys", ex::kMaxKeys}, {"bins", ex::kMaxBins}});
  EXPECT_EQ(most["histogram"]["samples"].get<std::int64_t>() * ex::kMaxDk, ex::kMaxWork);
  EXPECT_EQ(call("growth", {{"dk", 1}, {"keys", ex::kMaxKeys}, {"trials", ex::kMaxTrials}})["trials"], 2048);
  // A curve samples at d_k = 1, 2, ..., 1024: its budget is the sum.
  const json c = call("curve", {{"keys", 64}, {"trials", 128}});
  EXPECT_EQ(c["points"].size(), 11u);
  const json e2 = json::parse(ex::handle("POST", "/api/curve", R"({"keys": 64})").body);
  EXPECT_NE(e2["error"].get<std::string>().find("keys may be at most 32"), std::string::npos) << e2["error"];
}

TEST(ExplorerGate, RunsAFewLetsAFewWaitAndTurnsTheRestAway) {
  ex::WorkGate gate(1, 1, std::chrono::seconds(10));
  std::optional<ex::WorkGate::Turn> first(gate.enter());
  ASSERT_TRUE(*first);
  EXPECT_EQ(gate.running(), 1);
  std::atomic<int> second{-1};
  std::thread waiter([&] {
    const ex::WorkGate::Turn t = gate.enter();
    second = t ? 1 : 0;
  });
  for (int i = 0; i < 500 && gate.waiting() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(gate.waiting(), 1);
  // The queue is full: refused at once.
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(gate.enter());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  // Behind the full gate: costly calls are 503 with Retry-After, and still
  // 400 when they are bad; cheap ones run.
  ex::Response r = ex::handle("POST", "/api/growth", R"({"dk": 16})", &gate);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.retry_after, 1);
  EXPECT_TRUE(json::parse(r.body)["error"].is_string());
  for (const char* path : {"/api/curve", "/api/misconceptions"}) EXPECT_EQ(ex::handle("POST", path, "{}", &gate).status, 503) << path;
  EXPECT_EQ(ex::handle("POST", "/api/growth", R"({"dk": 0})", &gate).status, 400);
  EXPECT_EQ(ex::handle("POST", "/api/growth", R"({"dk":1024,"trials":2048,"keys":64})", &gate).status, 400);
  EXPECT_EQ(ex::handle("POST", "/api/scale", "{}", &gate).status, 200);
  EXPECT_EQ(ex::handle("POST", "/api/attention", "{}", &gate).status, 200);
  EXPECT_EQ(ex::handle("GET", "/api/info", "", &gate).status, 200);
  EXPECT_EQ(second.load(), -1);
  // The turn passes to the one waiting.
  first.reset();
  waiter.join();
  EXPECT_EQ(second.load(), 1);
  EXPECT_EQ(gate.running(), 0);
  EXPECT_EQ(gate.waiting(), 0);
  EXPECT_EQ(ex::handle("POST", "/api/growth", R"({"dk": 16})", &gate).status, 200);
  EXPECT_EQ(gate.running(), 0);  // handle() gave its turn back

  // A wait is bounded too.
  ex::WorkGate slow(1, 4, std::chrono::milliseconds(100));
  const ex::WorkGate::Turn held = slow.enter();
  start = std::chrono::steady_clock::now();
  EXPECT_FALSE(slow.enter());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(2));
  EXPECT_EQ(slow.waiting(), 0);
}

// ---------------------------------------------------------------- the Host header

const std::vector<std::string> kHostileHosts = {
    "", "127.0.0.1.evil.com", "127.0.0.1.evil.com:8080", "127.0.0.1.", "127.0.0.1.:80", "localhost.",
    "localhost.:8080", "localhost.evil", "localhost.evil.com:80", "evil.localhost", "localhostx", "xlocalhost",
    "evil.com.127.0.0.1", "evil127.0.0.1", "127.0.0.1evil", "127.0.0.1@evil.com", "evil.com@127.0.0.1",
    "user:pass@127.0.0.1", "localhost@evil", "127.0.0.1:80@evil.com", "127.0.0.1:80.evil.com", "127.0.0.1/evil",
    "127.0.0.1\\evil", "127.0.0.1#evil", "127.0.0.1?x", "127.0.0.1%2e", "localhost:", "localhost:0", "localhost:65536",
    "localhost:99999", "localhost:123456", "localhost:-1", "localhost:+80", "localhost:8o", "localhost:0x50",
    "localhost:80:80", "localhost:080", "127.0.0.1: 80", "127.0.0.256", "127.0.0", "127.1", "127.0.0.1.1",
    "0x7f.0.0.1", "0177.0.0.1", "127.0.0.01", "2130706433", "128.0.0.1", "10.0.0.1", "0.0.0.0", "attacker.example",
    "attacker.example:80", "::1", "::1:80", "[::1", "::1]", "[::1]x", "[::1]:", "[::1]:0", "[::1]:99999", "[::1]80",
    "[::2]", "[::]", "[::ffff:127.0.0.1]", "[::1%25lo]", "[::1%lo]", "[]", "[localhost]", "[127.0.0.1]",
    "[::1].evil.com", "[::1]:80:80", std::string("127.0.0.1\0.evil.com", 19), "local host", "*", "%6cocalhost"};

const std::vector<std::string> kLoopbackHosts = {
    "localhost", "localhost:8080", "LocalHost:1", "127.0.0.1", "127.0.0.1:80", "127.0.0.1:65535", "127.1.2.3",
    "127.255.255.254:9", "127.0.0.0", "[::1]", "[::1]:8080", "[0:0:0:0:0:0:0:1]:80"};

TEST(ExplorerHost, ALoopbackServerAcceptsExactlyItsNames) {
  const ex::HostCheck check("127.0.0.1");
  for (const std::string& h : kLoopbackHosts) EXPECT_TRUE(check.host_ok(h)) << h;
  for (const std::string& h : kHostileHosts) EXPECT_FALSE(check.host_ok(h)) << h;
  EXPECT_TRUE(check.origin_ok("http://127.0.0.1:8080"));
  EXPECT_TRUE(check.origin_ok("http://localhost"));
  EXPECT_TRUE(check.origin_ok("http://[::1]:8080"));
  for (const char* o : {"null", "", "http://", "https://127.0.0.1", "http://127.0.0.1.evil.com", "http://evil.com",
                        "http://127.0.0.1/", "http://127.0.0.1:8080/x", "file://", "HTTP://evil", "ws://localhost"}) {
    EXPECT_FALSE(check.origin_ok(o)) << o;
  }
  // --host localhost or ::1 is the same set.
  for (const char* given : {"localhost", "::1", "127.0.0.2"}) {
    const ex::HostCheck other(given);
    for (const std::string& h : kLoopbackHosts) EXPECT_TRUE(other.host_ok(h)) << given << " " << h;
    for (const std::string& h : kHostileHosts) EXPECT_FALSE(other.host_ok(h)) << given << " " << h;
  }
}

TEST(ExplorerHost, AServerOnAnotherHostAcceptsItsOwnNameAsGiven) {
  // Nothing binds here: a HostCheck only compares names.
  const ex::HostCheck lan("192.168.1.5");
  for (const char* h : {"192.168.1.5", "192.168.1.5:8080", "localhost:8080", "127.0.0.1"}) EXPECT_TRUE(lan.host_ok(h)) << h;
  for (const char* h : {"192.168.1.5.evil.com", "192.168.1.6", "192.168.1.5.", "192.168.1.5@evil", "192.168.001.5", ""}) {
    EXPECT_FALSE(lan.host_ok(h)) << h;
  }
  EXPECT_TRUE(lan.origin_ok("http://192.168.1.5:8080"));
  const ex::HostCheck named("Explorer.Lan");
  for (const char* h : {"explorer.lan", "EXPLORER.LAN:80"}) EXPECT_TRUE(named.host_ok(h)) << h;
  for (const char* h : {"explorer.lan.evil.com", "explorer.lan.", "x.explorer.lan", "explorer"}) EXPECT_FALSE(named.host_ok(h)) << h;
  const ex::HostCheck v6("2001:db8::5");
  for (const char* h : {"[2001:db8::5]", "[2001:DB8:0::5]:8080", "[::1]"}) EXPECT_TRUE(v6.host_ok(h)) << h;
  for (const char* h : {"2001:db8::5", "[2001:db8::6]", "[2001:db8::5]:0"}) EXPECT_FALSE(v6.host_ok(h)) << h;
  for (const char* wildcard : {"0.0.0.0", "::"}) {
    const ex::HostCheck any(wildcard);
    char name[256] = {};
    ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
    EXPECT_TRUE(any.host_ok(std::string(name) + ":8080")) << wildcard << " " << name;
    EXPECT_TRUE(any.host_ok("127.0.0.1:8080")) << wildcard;
    for (const std::string& h : kHostileHosts) {
      if (h != "10.0.0.1") {
        EXPECT_FALSE(any.host_ok(h)) << wildcard << " " << h;
      }
    }
  }
}

TEST(ExplorerApi, MalformedRequests) {
  auto field_of = [](const ex::Response& r) { return json::parse(r.body)["field"]; };
  ex::Response r = ex::handle("POST", "/api/scale", "{\"dk\": 64");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(field_of(r), "body");
  r = ex::handle("POST", "/api/scale", "[1, 2]");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(field_of(r), "body");
  r = ex::handle("POST", "/api/scale", "  ");  // no body: the defaults
  EXPECT_EQ(r.status, 200);
  r = ex::handle("POST", "/api/scale", std::string(ex::kMaxBodyBytes + 1, ' '));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(field_of(r), "body");
  r = ex::handle("GET", "/api/scale", "");
  EXPECT_EQ(r.status, 405);
  r = ex::handle("POST", "/api/info", "");
  EXPECT_EQ(r.status, 405);
  r = ex::handle("POST", "/api/nothing", "{}");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(json::parse(r.body)["error"].is_string());
}

// ---------------------------------------------------------------- the page

TEST(ExplorerAssets, AFixedSetOfFiles) {
  const ex::Asset* index = ex::find_asset("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->path, "/index.html");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  const std::vector<std::pair<std::string, std::string>> files = {
      {"/index.html", "text/html; charset=utf-8"},       {"/style.css", "text/css; charset=utf-8"},
      {"/favicon.svg", "image/svg+xml"},                 {"/main.js", "text/javascript; charset=utf-8"},
      {"/i18n.js", "text/javascript; charset=utf-8"},    {"/strings.en.js", "text/javascript; charset=utf-8"},
      {"/strings.ko.js", "text/javascript; charset=utf-8"}, {"/util.js", "text/javascript; charset=utf-8"},
      {"/state.js", "text/javascript; charset=utf-8"},   {"/scaling.js", "text/javascript; charset=utf-8"},
      {"/story.js", "text/javascript; charset=utf-8"},   {"/growth.js", "text/javascript; charset=utf-8"},
      {"/map.js", "text/javascript; charset=utf-8"},     {"/myths.js", "text/javascript; charset=utf-8"},
      {"/head.js", "text/javascript; charset=utf-8"},    {"/minilm-head.json", "application/json"},
      {"/hangul-subset.woff2", "font/woff2"},            {"/hangul-subset.OFL.txt", "text/plain; charset=utf-8"},
  };
  EXPECT_EQ(ex::assets().size(), files.size());
  for (const auto& [path, type] : files) {
    const ex::Asset* a = ex::find_asset(path);
    ASSERT_NE(a, nullptr) << path;
    EXPECT_FALSE(a->body.empty()) << path;
    EXPECT_EQ(a->content_type, type) << path;
  }
  // The font is a whole woff2 file (signature "wOF2"), shipped with its licence.
  EXPECT_EQ(ex::find_asset("/hangul-subset.woff2")->body.substr(0, 4), "wOF2");
  EXPECT_NE(std::string(ex::find_asset("/hangul-subset.OFL.txt")->body).find("SIL Open Font License"), std::string::npos);
  for (const char* path : {"", "/../CMakeLists.txt", "/web/index.html", "/index.html/", "/INDEX.HTML", "/main.js?x=1",
                           "/./main.js", "//main.js", "/api/info", "/embed.cmake", "/%2e%2e/CMakeLists.txt", "/app.js"}) {
    EXPECT_EQ(ex::find_asset(path), nullptr) << path;
  }
}

TEST(ExplorerAssets, PageIsSelfContained) {
  const std::string html(ex::find_asset("/index.html")->body);
  // Everything the page loads is one of the embedded files: no CDN, no external font.
  const std::regex ref(R"re((?:src|href)="([^"#]+)")re");
  int refs = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it, ++refs) {
    EXPECT_NE(ex::find_asset(std::string("/").append((*it)[1].str())), nullptr) << (*it)[1].str();
  }
  EXPECT_GE(refs, 3);
  EXPECT_EQ(html.find("http"), std::string::npos);
  // Every module's imports are embedded files, and nothing is fetched from elsewhere.
  const std::regex import_from(R"re(from "\./([^"]+)")re");
  int imports = 0;
  for (const ex::Asset& a : ex::assets()) {
    if (a.content_type.find("javascript") == std::string_view::npos) continue;
    const std::string js(a.body);
    EXPECT_EQ(js.find("https://"), std::string::npos) << a.path;
    EXPECT_EQ(js.find("import("), std::string::npos) << a.path;
    for (auto it = std::sregex_iterator(js.begin(), js.end(), import_from); it != std::sregex_iterator(); ++it, ++imports) {
      EXPECT_NE(ex::find_asset("/" + (*it)[1].str()), nullptr) << a.path << " imports " << (*it)[1].str();
    }
  }
  EXPECT_GE(imports, 10);
  const std::string css(ex::find_asset("/style.css")->body);
  EXPECT_EQ(css.find("@import"), std::string::npos);
  EXPECT_NE(css.find("url(\"hangul-subset.woff2\")"), std::string::npos);
  // Both languages, with the same keys.
  const std::string en(ex::find_asset("/strings.en.js")->body), ko(ex::find_asset("/strings.ko.js")->body);
  EXPECT_NE(ko.find("어텐션"), std::string::npos);
  const std::regex key(R"re(\n  "?([A-Za-z0-9_.]+)"?: )re");
  auto keys = [&](const std::string& s) {
    std::set<std::string> out;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), key); it != std::sregex_iterator(); ++it) out.insert((*it)[1].str());
    return out;
  };
  EXPECT_GT(keys(en).size(), 100u);
  EXPECT_EQ(keys(en), keys(ko));
  // The lesson's Korean sentence, as the lesson words it.
  EXPECT_NE(ko.find("Query와 Key를 비교한 점수를 √d_k로 나눈 뒤 Softmax에 넣는다."), std::string::npos);
  // No particle left for the reader to choose.
  for (const char* both : {"이(가)", "은(는)", "을(를)", "(으)로", "와(과)"}) EXPECT_EQ(ko.find(both), std::string::npos) << both;
}

// ---------------------------------------------------------------- processes

// A child process with its stdout and stderr on pipes.
struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;

  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)), out(std::exchange(o.out, -1)), err(std::exchange(o.err, -1)) {}

  static Child spawn(const std::vector<std::string>& args) {
    int o[2], e[2];
    if (pipe(o) != 0 || pipe(e) != 0) throw std::runtime_error("pipe");
    Child c;
    c.pid = fork();
    if (c.pid == 0) {
      dup2(o[1], 1);
      dup2(e[1], 2);
      close(o[0]);
      close(e[0]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(o[1]);
    close(e[1]);
    c.out = o[0];
    c.err = e[0];
    return c;
  }

  // One line of stdout, or "" after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::string line;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{out, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char ch;
      if (read(out, &ch, 1) != 1) break;
      if (ch == '\n') return line;
      line += ch;
    }
    return line;
  }

  static std::string drain(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
    return s;
  }

  // The exit code (128 + signal if killed), waiting at most `timeout`.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        pid = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
    if (err >= 0) close(err);
  }
};

// `sdpa serve --port 0`, its port read from the URL it prints.
struct Server {
  Child child;
  int port = 0;
  Server() : child(Child::spawn({SDPA_CLI, "serve", "--port", "0"})) {
    const std::string line = child.read_line();
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(http://127\.0\.0\.1:(\d+)/)"))) port = std::stoi(m[1].str());
  }
};

TEST(ExplorerServe, ServesThePageAndTheApi) {
  Server server;
  ASSERT_GT(server.port, 0) << "no URL printed";
  httplib::Client cli("127.0.0.1", server.port);
  cli.set_connection_timeout(5);
  cli.set_read_timeout(10);

  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(page->body, std::string(ex::find_asset("/index.html")->body));

  auto info = cli.Get("/api/info");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 200);
  EXPECT_EQ(info->get_header_value("Content-Type"), "application/json");

  auto scaled = cli.Post("/api/scale", R"({"score": 40, "dk": 64})", "application/json");
  ASSERT_TRUE(scaled);
  EXPECT_EQ(scaled->status, 200);
  EXPECT_EQ(json::parse(scaled->body)["scaled"], 5.0);

  auto bad = cli.Post("/api/scale", R"({"dk": 0})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["field"], "dk");

  // No path leaves the embedded set.
  for (const char* path : {"/../CMakeLists.txt", "/%2e%2e/CMakeLists.txt", "/web/index.html", "/..%2fCMakeLists.txt",
                           "/etc/passwd", "/index.html%00.js"}) {
    auto r = cli.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
  }
  auto missing = cli.Post("/api/nothing", "{}", "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  // Bodies are limited to 64 KiB.
  auto big = cli.Post("/api/scale", std::string(70000, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(json::parse(big->body)["field"], "body");

  // A page elsewhere cannot reach the API through a name that resolves to loopback.
  auto rebound = cli.Get("/api/info", {{"Host", "attacker.example:80"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);

  // Ctrl-C stops it cleanly.
  kill(server.child.pid, SIGINT);
  EXPECT_EQ(server.child.wait(), 0);
  EXPECT_NE(Child::drain(server.child.out).find("stopped"), std::string::npos);
}

// One HTTP exchange written by hand with 127.0.0.1:port (so that any Host
// header, or none, can be sent): the status code, 0 when no answer came
// within 5 s.
int raw_status(int port, const std::string& request, std::string* response = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  if (response) *response = got;
  std::smatch m;
  return std::regex_search(got, m, std::regex(R"(^HTTP/1\.[01] (\d{3}) )")) ? std::stoi(m[1].str()) : 0;
}

std::string get_with_host(const std::string& host) {
  return "GET /api/info HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
}

TEST(ExplorerServe, AnswersOnlyRequestsNamingThisServer) {
  Server server;
  ASSERT_GT(server.port, 0) << "no URL printed";
  const std::string port = std::to_string(server.port);
  for (std::string h : kLoopbackHosts) {
    if (h.find(':', h.find(']') == std::string::npos ? 0 : h.find(']')) == std::string::npos) h += ":" + port;
    EXPECT_EQ(raw_status(server.port, get_with_host(h)), 200) << h;
  }
  for (const std::string& h : kHostileHosts) {
    // Not one header line; or one httplib decodes ("%6cocalhost" is read as "localhost").
    if (h.find('\0') != std::string::npos || h.find(' ') != std::string::npos || h.find('%') != std::string::npos) continue;
    std::string body;
    EXPECT_EQ(raw_status(server.port, get_with_host(h), &body), 403) << h;
    if (!h.empty()) {
      const json e = json::parse(body.substr(body.find("\r\n\r\n") + 4), nullptr, false);
      EXPECT_NE(e.value("error", "").find("Host header must name this server"), std::string::npos) << h << " " << body;
    }
  }
  for (const std::string h : {"127.0.0.1.evil.com", "localhost.evil", "127.0.0.1@evil.com"}) {
    EXPECT_EQ(raw_status(server.port, get_with_host(h + ":" + port)), 403) << h;
  }
  // No Host header, or two.
  EXPECT_EQ(raw_status(server.port, "GET /api/info HTTP/1.1\r\nConnection: close\r\n\r\n"), 403);
  EXPECT_EQ(raw_status(server.port, "GET /api/info HTTP/1.0\r\n\r\n"), 403);
  EXPECT_EQ(raw_status(server.port, "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.com\r\n"
                                    "Connection: close\r\n\r\n"),
            403);
  // The page itself is guarded too, and so is a POST from another site's page.
  EXPECT_EQ(raw_status(server.port, "GET / HTTP/1.1\r\nHost: 127.0.0.1.evil.com\r\nConnection: close\r\n\r\n"), 403);
  auto post = [&](const std::string& origin) {
    const std::string body = R"({"dk": 64})";
    return raw_status(server.port, "POST /api/scale HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\nOrigin: " + origin +
                                       "\r\nContent-Type: text/plain\r\nContent-Length: " +
                                       std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  };
  EXPECT_EQ(post("http://127.0.0.1:" + port), 200);
  EXPECT_EQ(post("http://localhost:" + port), 200);
  for (const char* origin : {"http://evil.com", "http://127.0.0.1.evil.com:" , "null", "https://evil.com"}) {
    EXPECT_EQ(post(origin), 403) << origin;
  }
  kill(server.child.pid, SIGTERM);
  EXPECT_EQ(server.child.wait(), 0);
}

// Costly requests run a few at a time and the rest are turned away (503,
// Retry-After) at once: a cheap request sent among them is answered
// promptly, and the server works normally afterwards.
TEST(ExplorerServe, CostlyRequestsDoNotStallTheServer) {
  Server server;
  ASSERT_GT(server.port, 0) << "no URL printed";
  const int port = server.port;
  auto client = [port] {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_connection_timeout(5);
    c->set_read_timeout(60);
    return c;
  };
  // The request that used to take seconds: refused before any work.
  auto start = std::chrono::steady_clock::now();
  auto refused = client()->Post("/api/growth", R"({"dk":1024,"trials":2048,"keys":64,"bins":200})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(json::parse(refused->body)["field"], "trials");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));

  // The costliest request allowed, 16 at once.
  const std::string heavy = R"({"dk":1024,"trials":256,"keys":64,"bins":200})";
  constexpr int kHeavy = 16;
  std::vector<int> status(kHeavy, -1);
  std::vector<std::string> retry_after(kHeavy);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kHeavy; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      ++started;
      if (auto r = c->Post("/api/growth", heavy, "application/json")) {
        status[static_cast<std::size_t>(i)] = r->status;
        retry_after[static_cast<std::size_t>(i)] = r->get_header_value("Retry-After");
      } else {
        status[static_cast<std::size_t>(i)] = 0;
      }
    });
  }
  for (int i = 0; i < 500 && started.load() < kHeavy; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all of them sent
  start = std::chrono::steady_clock::now();
  auto light = client()->Post("/api/scale", R"({"score": 40, "dk": 64})", "application/json");
  const auto light_time = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(light);
  EXPECT_EQ(light->status, 200);
  EXPECT_LT(light_time, std::chrono::seconds(1));
  std::printf("light request among %d costly ones: %lld ms\n", kHeavy,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(light_time).count()));
  start = std::chrono::steady_clock::now();
  auto page = client()->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  for (std::thread& t : threads) t.join();
  int ok = 0;
  for (int i = 0; i < kHeavy; ++i) {
    const int st = status[static_cast<std::size_t>(i)];
    EXPECT_TRUE(st == 200 || st == 503) << "request " << i << ": " << st;
    if (st == 503) {
      EXPECT_EQ(retry_after[static_cast<std::size_t>(i)], "1") << i;
    }
    ok += st == 200 ? 1 : 0;
  }
  EXPECT_GE(ok, 1);
  std::printf("costly requests: %d answered 200, %d answered 503, all within %lld ms\n", ok, kHeavy - ok,
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()));
  // Afterwards: everything answers, the costly endpoint included.
  for (int i = 0; i < 3; ++i) {
    auto again = client()->Post("/api/growth", heavy, "application/json");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 200);
  }
  auto info = client()->Get("/api/info");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 200);
  kill(server.child.pid, SIGTERM);
  EXPECT_EQ(server.child.wait(), 0);
}

TEST(ExplorerServe, SaysWhenThePortIsTaken) {
  Server first;
  ASSERT_GT(first.port, 0);
  Child second = Child::spawn({SDPA_CLI, "serve", "--port", std::to_string(first.port)});
  EXPECT_EQ(second.wait(), 1);
  const std::string err = Child::drain(second.err);
  EXPECT_NE(err.find("port " + std::to_string(first.port) + " is in use; try --port"), std::string::npos) << err;
  kill(first.child.pid, SIGTERM);
  EXPECT_EQ(first.child.wait(), 0);
}

TEST(ExplorerServe, RejectsABadPort) {
  Child c = Child::spawn({SDPA_CLI, "serve", "--port", "70000"});
  EXPECT_EQ(c.wait(), 2);
}

TEST(ExplorerStats, PrintsTheTableAndWritesTheSvgAtomically) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sdpa_stats_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path svg = dir / "stats.svg";
  {
    std::ofstream old(svg);
    old << "old contents";
  }
  Child c = Child::spawn({SDPA_CLI, "stats", "--dk-max", "64", "--svg", svg.string()});
  const std::string out = Child::drain(c.out);
  EXPECT_EQ(c.wait(), 0) << Child::drain(c.err);
  EXPECT_NE(out.find("d_k"), std::string::npos);
  int rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) rows += std::regex_search(line, std::regex(R"(^\s+\d+\s+\d)")) ? 1 : 0;
  EXPECT_EQ(rows, 7);  // 1, 2, ..., 64

  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  EXPECT_NE(text.find("entropy"), std::string::npos);
  // Nothing left behind but the chart itself.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);

  // A directory that does not exist: exit 1, the old file untouched elsewhere.
  Child bad = Child::spawn({SDPA_CLI, "stats", "--dk-max", "4", "--svg", (dir / "missing" / "x.svg").string()});
  Child::drain(bad.out);
  EXPECT_EQ(bad.wait(), 1);
  Child usage = Child::spawn({SDPA_CLI, "stats", "--dk-max", "0"});
  EXPECT_EQ(usage.wait(), 2);
  std::filesystem::remove_all(dir);
}

// `sdpa stats --lang ko`: the same numbers, in Korean, table and chart; the uniform weight and
// the unscaled gradient's peak below the table in both languages.
TEST(ExplorerStats, SpeaksKorean) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sdpa_stats_ko_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path svg = dir / "stats-ko.svg";
  Child ko = Child::spawn({SDPA_CLI, "stats", "--dk-max", "64", "--lang", "ko", "--svg", svg.string()});
  const std::string out_ko = Child::drain(ko.out);
  EXPECT_EQ(ko.wait(), 0) << Child::drain(ko.err);
  Child en = Child::spawn({SDPA_CLI, "stats", "--dk-max", "64"});
  const std::string out_en = Child::drain(en.out);
  EXPECT_EQ(en.wait(), 0);
  for (const char* s : {"점수의 표준편차", "가장 큰 가중치", "기울기 크기", "균등 소프트맥스", "1/16 = 0.0625", "d_k = 4에서 가장 큼"}) {
    EXPECT_NE(out_ko.find(s), std::string::npos) << s << "\n" << out_ko;
  }
  for (const char* s : {"std of scores", "largest weight of a uniform softmax over 16 keys: 1/16 = 0.0625",
                        "without scaling the gradient first rises (largest at d_k = 4)"}) {
    EXPECT_NE(out_en.find(s), std::string::npos) << s << "\n" << out_en;
  }
  // The numbers are the same in both languages: the rows of the table match.
  auto rows = [](const std::string& out) {
    std::vector<std::string> r;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      if (std::regex_search(line, std::regex(R"(^\s+\d+\s+\d)"))) r.push_back(line);
    }
    return r;
  };
  EXPECT_EQ(rows(out_ko).size(), 7u);
  EXPECT_EQ(rows(out_ko), rows(out_en));
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("어텐션 점수는 왜"), std::string::npos);
  EXPECT_NE(text.find("키 16개 균등: 0.062"), std::string::npos);  // the uniform line of the largest weight
  Child bad = Child::spawn({SDPA_CLI, "stats", "--lang", "fr"});
  Child::drain(bad.out);
  const std::string err = Child::drain(bad.err);
  EXPECT_EQ(bad.wait(), 2);
  EXPECT_NE(err.find("--lang"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

}  // namespace
