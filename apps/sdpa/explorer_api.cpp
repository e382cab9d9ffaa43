// The explorer's JSON API: the endpoints and the routing (see explorer_api.h).
// Requests are read by json_fields.h, the teaching maths is teaching_math.h,
// the attention maps and the read-back scale are sdpa::attention calls.
#include "explorer_api.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "admission.h"
#include "json_fields.h"
#include "rng.h"
#include "sdpa/attention.h"
#include "teaching_math.h"

namespace sdpa::explorer {

using json = nlohmann::json;
using namespace fields;
using teaching::entropy;
using teaching::GrowthConfig;
using teaching::GrowthPoint;
using teaching::log_softmax;
using teaching::mix;
using teaching::Normal;
using teaching::ranks;
using teaching::softmax;
using teaching::SoftmaxStats;

namespace {

json stats_json(std::span<const double> scores) {
  const std::vector<double> p = softmax(scores);
  const std::vector<double> lp = log_softmax(scores);
  return {{"probs", p},
          {"log_probs", lp},
          {"ranks", ranks(lp)},
          {"max_weight", *std::max_element(p.begin(), p.end())},
          {"entropy", entropy(p)},
          {"grad_norm", teaching::jacobian_norm(p)}};
}

json softmax_stats_json(const SoftmaxStats& s) {
  return {{"max_weight", s.max_weight}, {"entropy", s.entropy}, {"grad_norm", s.grad_norm}};
}

json point_json(const GrowthPoint& p) {
  return {{"dk", p.dk},
          {"sqrt_dk", std::sqrt(static_cast<double>(p.dk))},
          {"std_raw", p.std_raw},
          {"std_scaled", p.std_scaled},
          {"raw", softmax_stats_json(p.raw)},
          {"scaled", softmax_stats_json(p.scaled)}};
}

// Refuses a growth experiment over kMaxWork: `dks_sum` is the sum of the d_k it samples at.
void check_work(const json& req, std::int64_t dks_sum, const GrowthConfig& cfg, const std::string& what) {
  const std::int64_t work = dks_sum * cfg.keys * cfg.trials;
  if (work <= kMaxWork) return;
  const bool trials_given = find(req, "trials") != nullptr || find(req, "keys") == nullptr;
  const char* field = trials_given ? "trials" : "keys";
  const std::int64_t per = dks_sum * (trials_given ? cfg.keys : cfg.trials);
  const std::int64_t fit = std::max<std::int64_t>(kMaxWork / per, 0);
  throw ApiError(field, std::string(field) + ": " + what + " draws " + std::to_string(work) +
                            " random scores (d_k·keys·trials), more than the " + std::to_string(kMaxWork) +
                            " one request may; here " + field + " may be at most " + std::to_string(fit));
}

GrowthConfig growth_config(const json& req) {
  GrowthConfig cfg;
  cfg.keys = static_cast<int>(get_int(req, "keys", kMinKeys, kMaxKeys, cfg.keys));
  cfg.trials = static_cast<int>(get_int(req, "trials", kMinTrials, kMaxTrials, cfg.trials));
  cfg.seed = get_seed(req, "seed", cfg.seed);
  return cfg;
}

const std::vector<std::string> kStoryLabels = {"Tom", "New York", "lives"};
const std::vector<double> kStoryScores = {40, 12, 8};
constexpr int kStoryDk = 64;

// A matrix as rows of numbers.
template <class T>
json rows_json(const std::vector<T>& m, std::size_t rows, std::size_t cols) {
  json out = json::array();
  for (std::size_t i = 0; i < rows; ++i) {
    json row = json::array();
    for (std::size_t c = 0; c < cols; ++c) row.push_back(static_cast<double>(m[i * cols + c]));
    out.push_back(std::move(row));
  }
  return out;
}

// One sdpa::attention call over [1, 1, n, d] inputs with the probability output.
struct MapResult {
  std::vector<float> probs, out, lse;
};
MapResult run_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                        std::int64_t n, std::int64_t d, std::int64_t dv, bool causal, std::optional<double> scale) {
  MapResult r;
  r.probs.assign(static_cast<std::size_t>(n * n), 0.0f);
  r.out.assign(static_cast<std::size_t>(n * dv), 0.0f);
  r.lse.assign(static_cast<std::size_t>(n), 0.0f);
  Options opt;
  opt.scale = scale;
  opt.causal = causal;
  opt.threads = 1;
  opt.probs = TensorView::contiguous(r.probs.data(), {1, 1, n, n});
  opt.lse = TensorView::contiguous(r.lse.data(), {1, 1, n});
  attention(TensorView::contiguous(q.data(), {1, 1, n, d}), TensorView::contiguous(k.data(), {1, 1, n, d}),
            TensorView::contiguous(v.data(), {1, 1, n, dv}), TensorView::contiguous(r.out.data(), {1, 1, n, dv}),
            opt);
  return r;
}

}  // namespace

// ---------------------------------------------------------------- endpoints

json info() {
  return {{"isa", isa_name(resolve_isa(Isa::automatic))},
          {"limits",
           {{"dk", {1, kMaxDk}},
            {"score", {-kMaxAbsScore, kMaxAbsScore}},
            {"scores", kMaxScores},
            {"keys", {kMinKeys, kMaxKeys}},
            {"trials", {kMinTrials, kMaxTrials}},
            {"bins", {kMinBins, kMaxBins}},
            {"tokens", kMaxTokens},
            {"d", {1, kMaxHeadDim}},
            {"dv", {1, kMaxValueDim}},
            {"entry", {-kMaxAbsEntry, kMaxAbsEntry}},
            {"seed", {0, kMaxSeed}},
            {"body_bytes", kMaxBodyBytes},
            {"work", kMaxWork}}},
          {"defaults",
           {{"score", kStoryScores[0]},
            {"dk", kStoryDk},
            {"labels", kStoryLabels},
            {"scores", kStoryScores},
            {"keys", GrowthConfig{}.keys},
            {"trials", GrowthConfig{}.trials},
            {"seed", GrowthConfig{}.seed},
            {"tokens", {"Tom", "lives", "in", "New York"}},
            {"d", 16},
            {"dv", 4}}}};
}

json scale(const json& req) {
  check_fields(req, {"score", "dk"});
  const double score = get_double(req, "score", -kMaxAbsScore, kMaxAbsScore, kStoryScores[0]);
  const int dk = static_cast<int>(get_int(req, "dk", 1, kMaxDk, kStoryDk));
  const double root = std::sqrt(static_cast<double>(dk));
  const double r = std::round(root);
  return {{"score", score},
          {"dk", dk},
          {"sqrt_dk", root},
          {"sqrt_is_integer", r * r == dk},
          {"scale", 1.0 / root},
          {"scaled", score / root}};
}

json softmax_story(const json& req) {
  check_fields(req, {"scores", "labels", "dk"});
  const std::vector<double> scores = get_numbers(req, "scores", 1, kMaxScores, -kMaxAbsScore, kMaxAbsScore, kStoryScores);
  std::vector<std::string> labels;
  if (find(req, "labels")) {
    labels = get_labels(req, "labels", scores.size(), scores.size(), kMaxLabelBytes, {});
  } else if (scores.size() == kStoryLabels.size()) {
    labels = kStoryLabels;
  } else {
    for (std::size_t i = 0; i < scores.size(); ++i) labels.push_back("key " + std::to_string(i + 1));
  }
  const int dk = static_cast<int>(get_int(req, "dk", 1, kMaxDk, kStoryDk));
  const double root = std::sqrt(static_cast<double>(dk));
  std::vector<double> scaled;
  for (double s : scores) scaled.push_back(s / root);
  json raw_stats = stats_json(scores);
  json scaled_stats = stats_json(scaled);
  const bool same = raw_stats["ranks"] == scaled_stats["ranks"];
  return {{"labels", labels},
          {"scores", scores},
          {"dk", dk},
          {"sqrt_dk", root},
          {"scaled_scores", scaled},
          {"raw", std::move(raw_stats)},
          {"scaled", std::move(scaled_stats)},
          {"score_ranks", ranks(scores)},
          {"same_order", same}};
}

json growth(const json& req) {
  check_fields(req, {"dk", "seed", "keys", "trials", "bins"});
  const int dk = static_cast<int>(get_int(req, "dk", 1, kMaxDk, kStoryDk));
  const GrowthConfig cfg = growth_config(req);
  const int bins = static_cast<int>(get_int(req, "bins", kMinBins, kMaxBins, 41));
  check_work(req, dk, cfg, "dk " + std::to_string(dk) + " with " + std::to_string(cfg.keys) + " keys and " +
                               std::to_string(cfg.trials) + " trials");
  admit();
  std::vector<double> samples;
  const GrowthPoint pt = teaching::growth_point(dk, cfg, &samples);
  // One x axis for both histograms: ±4 standard deviations of the raw scores.
  const double root = std::sqrt(static_cast<double>(dk));
  const double hi = 4.0 * root, lo = -hi, width = (hi - lo) / bins;
  std::vector<int> raw_counts(static_cast<std::size_t>(bins)), scaled_counts(static_cast<std::size_t>(bins));
  int raw_out[2] = {0, 0}, scaled_out[2] = {0, 0};
  auto put = [&](double x, std::vector<int>& counts, int (&outside)[2]) {
    if (x < lo) {
      ++outside[0];
    } else if (x >= hi) {
      ++outside[1];
    } else {
      counts[std::min(static_cast<std::size_t>((x - lo) / width), counts.size() - 1)]++;
    }
  };
  for (double s : samples) {
    put(s, raw_counts, raw_out);
    put(s / root, scaled_counts, scaled_out);
  }
  json out = point_json(pt);
  out["keys"] = cfg.keys;
  out["trials"] = cfg.trials;
  out["seed"] = cfg.seed;
  out["max_entropy"] = std::log(static_cast<double>(cfg.keys));
  out["histogram"] = {{"lo", lo},
                      {"hi", hi},
                      {"bins", bins},
                      {"width", width},
                      {"samples", samples.size()},
                      {"raw", raw_counts},
                      {"scaled", scaled_counts},
                      {"below", {{"raw", raw_out[0]}, {"scaled", scaled_out[0]}}},
                      {"above", {{"raw", raw_out[1]}, {"scaled", scaled_out[1]}}}};
  return out;
}

json curve(const json& req) {
  check_fields(req, {"dk_max", "seed", "keys", "trials"});
  const int dk_max = static_cast<int>(get_int(req, "dk_max", 1, kMaxDk, kMaxDk));
  const GrowthConfig cfg = growth_config(req);
  std::int64_t dks_sum = 0;
  for (int dk : teaching::growth_dks(dk_max)) dks_sum += dk;
  check_work(req, dks_sum, cfg, "the curve up to dk_max " + std::to_string(dk_max) + " with " +
                                    std::to_string(cfg.keys) + " keys and " + std::to_string(cfg.trials) + " trials");
  // The page asks for the same curve on every reload: keep the last few.
  using Key = std::tuple<int, int, int, std::uint64_t>;
  static std::mutex mutex;
  static std::map<Key, json> cache;
  const Key key{dk_max, cfg.keys, cfg.trials, cfg.seed};
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  admit();
  const std::vector<GrowthPoint> pts = teaching::growth_curve(dk_max, cfg);
  json points = json::array();
  for (const GrowthPoint& p : pts) points.push_back(point_json(p));
  json out = {{"keys", cfg.keys},
              {"trials", cfg.trials},
              {"seed", cfg.seed},
              {"max_entropy", std::log(static_cast<double>(cfg.keys))},
              {"uniform_weight", 1.0 / cfg.keys},
              {"raw_grad_peak", teaching::raw_gradient_peak(pts)},
              {"points", std::move(points)}};
  std::lock_guard lock(mutex);
  if (cache.size() >= 16) cache.clear();
  cache.emplace(key, out);
  return out;
}

namespace {

// attention_map and real_head: `max_dv` bounds the value rows; `random_allowed`
// lets Q, K, V be drawn from a seed when they are not entered.
json attention_of(const json& req, std::size_t max_dv, bool random_allowed) {
  const std::vector<std::string> tokens =
      get_labels(req, "tokens", 1, kMaxTokens, kMaxTokenBytes, {"Tom", "lives", "in", "New York"});
  const std::size_t n = tokens.size();
  const bool causal = get_bool(req, "causal", false);
  const std::uint64_t seed = random_allowed ? get_seed(req, "seed", 7) : 0;
  const bool entered = !random_allowed || find(req, "q") || find(req, "k") || find(req, "v");
  std::size_t d = static_cast<std::size_t>(get_int(req, "d", 1, kMaxHeadDim, 16));
  std::size_t dv = static_cast<std::size_t>(get_int(req, "dv", 1, static_cast<std::int64_t>(max_dv), 4));
  std::vector<double> q, k, v;
  if (entered) {
    for (const char* name : {"q", "k", "v"}) {
      if (!find(req, name)) {
        throw ApiError(name, std::string(name) + ": expected a matrix (q, k and v are entered together), got nothing");
      }
    }
    if (!find(req, "d")) d = 0;
    if (!find(req, "dv")) dv = 0;
    q = get_matrix(req["q"], "q", n, d, kMaxHeadDim);
    k = get_matrix(req["k"], "k", n, d, kMaxHeadDim);
    v = get_matrix(req["v"], "v", n, dv, max_dv);
  } else {
    // Q, K, V ~ N(0, 1), one stream per matrix so changing dv leaves Q and K alone.
    Normal nq(mix(seed ^ 0x51)), nk(mix(seed ^ 0x4b)), nv(mix(seed ^ 0x56));
    for (std::size_t i = 0; i < n * d; ++i) q.push_back(nq());
    for (std::size_t i = 0; i < n * d; ++i) k.push_back(nk());
    for (std::size_t i = 0; i < n * dv; ++i) v.push_back(nv());
  }
  // The library works in float32: what it sees is what the page shows.
  auto to_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const std::vector<float> qf = to_float(q), kf = to_float(k), vf = to_float(v);
  const auto N = static_cast<std::int64_t>(n), D = static_cast<std::int64_t>(d), DV = static_cast<std::int64_t>(dv);
  const MapResult scaled = run_attention(qf, kf, vf, N, D, DV, causal, std::nullopt);
  const MapResult unscaled = run_attention(qf, kf, vf, N, D, DV, causal, 1.0);

  std::vector<double> scores(n * n);
  json visible = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    json row = json::array();
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(qf[i * d + c]) * kf[j * d + c];
      scores[i * n + j] = dot;
      row.push_back(!causal || j <= i);
    }
    visible.push_back(std::move(row));
  }
  auto side = [&](const MapResult& r, double used_scale) {
    json sums = json::array();
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < n; ++j) s += r.probs[i * n + j];
      sums.push_back(s);
    }
    json entropies = json::array();
    double mean_entropy = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<double> p(r.probs.begin() + static_cast<std::ptrdiff_t>(i * n),
                            r.probs.begin() + static_cast<std::ptrdiff_t>((i + 1) * n));
      entropies.push_back(entropy(p));
      mean_entropy += entropy(p) / static_cast<double>(n);
    }
    return json{{"scale", used_scale},
                {"probs", rows_json(r.probs, n, n)},
                {"row_sums", std::move(sums)},
                {"entropy", std::move(entropies)},
                {"mean_entropy", mean_entropy},
                {"out", rows_json(r.out, n, dv)},
                {"lse", std::vector<double>(r.lse.begin(), r.lse.end())}};
  };
  return {{"tokens", tokens},
          {"n", n},
          {"d", d},
          {"dv", dv},
          {"causal", causal},
          {"seed", seed},
          {"entered", entered},
          {"q", rows_json(qf, n, d)},
          {"k", rows_json(kf, n, d)},
          {"v", rows_json(vf, n, dv)},
          {"scores", rows_json(scores, n, n)},
          {"visible", std::move(visible)},
          {"scaled", side(scaled, 1.0 / std::sqrt(static_cast<double>(d)))},
          {"unscaled", side(unscaled, 1.0)},
          {"isa", isa_name(resolve_isa(Isa::automatic))}};
}

}  // namespace

json attention_map(const json& req) {
  check_fields(req, {"tokens", "d", "dv", "seed", "causal", "q", "k", "v"});
  return attention_of(req, kMaxValueDim, true);
}

json real_head(const json& req) {
  check_fields(req, {"tokens", "causal", "q", "k", "v"});
  return attention_of(req, kMaxHeadDim, false);
}

json misconceptions(const json& req) {
  check_fields(req, {"scores", "labels", "dk", "big_dk", "seed"});
  const std::vector<double> scores = get_numbers(req, "scores", 2, kMaxScores, -kMaxAbsScore, kMaxAbsScore, kStoryScores);
  if (find(req, "labels")) get_labels(req, "labels", scores.size(), scores.size(), kMaxLabelBytes, {});
  const int dk = static_cast<int>(get_int(req, "dk", 1, kMaxDk, kStoryDk));
  const int big_dk = static_cast<int>(get_int(req, "big_dk", 1, kMaxDk, kMaxDk));
  const std::uint64_t seed = get_seed(req, "seed", 1);
  const double root = std::sqrt(static_cast<double>(dk));
  admit();

  // 1. "Scaling changes which word wins": ranks before and after, for these
  //    scores and for many random score vectors.
  std::vector<double> scaled;
  for (double s : scores) scaled.push_back(s / root);
  const std::vector<int> r_raw = ranks(log_softmax(scores)), r_scaled = ranks(log_softmax(scaled));
  const std::vector<double> p_raw = softmax(scores), p_scaled = softmax(scaled);
  constexpr int kTrials = 1000;
  int changed = 0, winner_changed = 0;
  Normal normal(mix(seed ^ 0x6f72646572));
  std::vector<double> s(scores.size()), t(scores.size());
  for (int trial = 0; trial < kTrials; ++trial) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      s[i] = normal() * root * 4;
      t[i] = s[i] / root;
    }
    const std::vector<int> a = ranks(log_softmax(s)), b = ranks(log_softmax(t));
    changed += a != b ? 1 : 0;
    winner_changed += std::find(a.begin(), a.end(), 1) - a.begin() != std::find(b.begin(), b.end(), 1) - b.begin();
  }
  const std::size_t top = static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());

  // 2. "√d_k is a learned weight": the library's default scale, read back from
  //    its own output for two unrelated random inputs, is 1/√d_k; nothing else
  //    enters it. With two keys, log(p0/p1) = scale·(s0 − s1).
  json recovered = json::array();
  for (std::uint64_t which = 0; which < 2; ++which) {
    Normal nq(mix(seed ^ (0x7100 + which)));
    const std::int64_t d = dk;
    std::vector<float> q(static_cast<std::size_t>(d)), k(static_cast<std::size_t>(2 * d)), v(2, 0.0f);
    for (float& x : q) x = static_cast<float>(nq() * (which + 1) * 0.5);
    for (float& x : k) x = static_cast<float>(nq());
    double s0 = 0, s1 = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      s0 += static_cast<double>(q[static_cast<std::size_t>(c)]) * k[static_cast<std::size_t>(c)];
      s1 += static_cast<double>(q[static_cast<std::size_t>(c)]) * k[static_cast<std::size_t>(d + c)];
    }
    std::vector<float> probs(2), out(1);
    Options opt;
    opt.threads = 1;
    opt.probs = TensorView::contiguous(probs.data(), {1, 1, 1, 2});
    attention(TensorView::contiguous(q.data(), {1, 1, 1, d}), TensorView::contiguous(k.data(), {1, 1, 2, d}),
              TensorView::contiguous(v.data(), {1, 1, 2, 1}), TensorView::contiguous(out.data(), {1, 1, 1, 1}), opt);
    const bool readable = probs[0] > 0 && probs[1] > 0 && std::abs(s0 - s1) > 1e-3;
    json entry = {{"score_gap", s0 - s1}, {"probs", {probs[0], probs[1]}}};
    entry["scale"] = readable ? json(std::log(static_cast<double>(probs[0]) / probs[1]) / (s0 - s1)) : json(nullptr);
    recovered.push_back(std::move(entry));
  }
  json table = json::array();
  for (int d : {1, 4, 16, 64, 256, 1024}) table.push_back({{"dk", d}, {"scale", 1.0 / std::sqrt(double(d))}});

  // 3. "A big d_k is fine without scaling": the softmax saturates.
  const GrowthConfig cfg{16, 256, seed};
  const GrowthPoint small = teaching::growth_point(1, cfg), big = teaching::growth_point(big_dk, cfg);

  return {
      {"order",
       {{"scores", scores},
        {"scaled_scores", scaled},
        {"dk", dk},
        {"sqrt_dk", root},
        {"ranks_raw", r_raw},
        {"ranks_scaled", r_scaled},
        {"same", r_raw == r_scaled},
        {"random_trials", kTrials},
        {"random_changed", changed},
        {"random_winner_changed", winner_changed}}},
      {"learned",
       {{"dk", dk},
        {"sqrt_dk", root},
        {"scale", 1.0 / root},
        {"recovered", std::move(recovered)},
        {"table", std::move(table)},
        {"trainable_parameters", 0}}},
      {"big_dk",
       {{"dk", big_dk},
        {"keys", cfg.keys},
        {"max_entropy", std::log(static_cast<double>(cfg.keys))},
        {"small", point_json(small)},
        {"big", point_json(big)}}},
      {"flat",
       {{"top", top},
        {"top_raw", p_raw[top]},
        {"top_scaled", p_scaled[top]},
        {"uniform", 1.0 / static_cast<double>(scores.size())},
        {"probs_raw", p_raw},
        {"probs_scaled", p_scaled}}},
  };
}

// ---------------------------------------------------------------- routing

std::string error_body(std::string_view message, std::string_view field) {
  json body = {{"error", std::string(message)}, {"field", field.empty() ? json(nullptr) : json(std::string(field))}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Response handle(std::string_view method, std::string_view path, std::string_view body, WorkGate* gate) {
  using Endpoint = std::function<json(const json&)>;
  static const std::map<std::string, Endpoint, std::less<>> posts = {
      {"/api/scale", scale},         {"/api/softmax", softmax_story},     {"/api/growth", growth},
      {"/api/curve", curve},         {"/api/attention", attention_map},   {"/api/misconceptions", misconceptions},
      {"/api/head", real_head},
  };
  try {
    if (path == "/api/info") {
      if (method != "GET" && method != "HEAD") return {405, error_body("/api/info: use GET")};
      return {200, info().dump()};
    }
    const auto it = posts.find(path);
    if (it == posts.end()) return {404, error_body("no API endpoint " + std::string(path).substr(0, 64))};
    if (method != "POST") return {405, error_body(std::string(path) + ": use POST with a JSON body")};
    if (body.size() > kMaxBodyBytes) {
      return {413, error_body("request body: expected at most " + std::to_string(kMaxBodyBytes) + " bytes, got " +
                                  std::to_string(body.size()),
                              "body")};
    }
    json req = json::object();
    if (body.find_first_not_of(" \t\r\n") != std::string_view::npos) {
      req = json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (req.is_discarded()) return {400, error_body("body: expected a JSON object, got malformed JSON", "body")};
      if (!req.is_object()) return {400, error_body("body: expected a JSON object, got " + show(req), "body")};
    }
    const Admission admission(gate);
    return {200, it->second(req).dump(-1, ' ', false, json::error_handler_t::replace)};
  } catch (const Busy&) {
    return {503,
            error_body(std::string(path) + ": the server is busy with " + std::to_string(gate->running_limit()) +
                       " costly requests and " + std::to_string(gate->waiting_limit()) + " waiting; try again shortly"),
            1};
  } catch (const ApiError& e) {
    return {400, error_body(e.what(), e.field())};
  } catch (const sdpa::Error& e) {
    return {400, error_body(e.what(), e.arg())};
  } catch (const std::exception& e) {
    return {500, error_body(std::string("internal error: ") + e.what())};
  }
}

const Asset* find_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const Asset& a : assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace sdpa::explorer
