// The explorer's JSON API: why attention scores are divided by √d_k.
//
// Every endpoint is a plain function from a request object to a response
// object, so tests call them without a socket; `sdpa serve` (serve.cpp) only
// wires handle() and find_asset() to HTTP. All numbers the page shows come
// from here: scaled scores and softmax weights are computed in double, the
// attention maps by sdpa::attention (Options::probs).
//
//   GET  /api/info            limits, defaults, the kernel ISA
//   POST /api/scale           {score, dk}                     → √d_k, score ÷ √d_k
//   POST /api/softmax         {scores, labels?, dk}           → weights and ranks, raw vs scaled
//   POST /api/growth          {dk, seed?, keys?, trials?, bins?} → histogram and softmax statistics at d_k
//   POST /api/curve           {dk_max?, seed?, keys?, trials?} → the same statistics over d_k = 1, 2, 4, ...
//   POST /api/attention       {tokens, d?, dv?, seed?, causal?, q?, k?, v?} → attention maps with and without scaling
//   POST /api/misconceptions  {scores?, dk?, big_dk?, seed?}  → live checks of common misunderstandings
//
// A bad request is answered with HTTP 400 and {"error": "dk: expected ...", "field": "dk"}.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa::explorer {

// ---- Limits (reported by /api/info; every request is checked against them).
inline constexpr int kMaxDk = 1024;              // d_k of the slider and the growth experiment
inline constexpr double kMaxAbsScore = 1000;     // |raw score|
inline constexpr int kMaxScores = 16;            // entries of the softmax story
inline constexpr std::size_t kMaxLabelBytes = 32;
inline constexpr int kMinKeys = 2, kMaxKeys = 64;        // keys per softmax row in the growth experiment
inline constexpr int kMinTrials = 16, kMaxTrials = 2048; // softmax rows per d_k
inline constexpr int kMinBins = 4, kMaxBins = 200;
inline constexpr int kMaxTokens = 16;            // attention map size
inline constexpr std::size_t kMaxTokenBytes = 32;
inline constexpr int kMaxHeadDim = 256;          // d of the attention map
inline constexpr int kMaxValueDim = 16;          // dv of the attention map
inline constexpr double kMaxAbsEntry = 1000;     // |entry| of entered Q, K, V
inline constexpr std::uint64_t kMaxSeed = (std::uint64_t{1} << 53) - 1;  // exact in a JavaScript number
inline constexpr std::size_t kMaxBodyBytes = 64 * 1024;

// A request the API refuses: `field` names the offending top-level field
// ("dk", "scores", "body" for a malformed or oversized body).
class ApiError : public std::runtime_error {
 public:
  ApiError(std::string field, const std::string& message) : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// ---- Softmax arithmetic (double).
std::vector<double> softmax(std::span<const double> scores);
// log(softmax): strictly increasing in the score, no underflow (ranks are read from it).
std::vector<double> log_softmax(std::span<const double> scores);
// −Σ p·ln p in nats (0 ≤ H ≤ ln n).
double entropy(std::span<const double> p);
// ‖diag(p) − p·pᵀ‖_F: the size of the softmax Jacobian; tends to 0 as the softmax saturates.
double jacobian_norm(std::span<const double> p);
// 1 + the number of strictly larger values (ties share a rank).
std::vector<int> ranks(std::span<const double> values);

// ---- Experiment (c): q, k ~ N(0, I_dk); raw scores q·k have std √d_k, scaled ones std 1.
struct GrowthConfig {
  int keys = 16;          // keys per softmax row
  int trials = 256;       // softmax rows (queries) per d_k
  std::uint64_t seed = 1;
};
struct SoftmaxStats {
  double max_weight = 0;  // mean over rows of the largest weight
  double entropy = 0;     // mean entropy (nats)
  double grad_norm = 0;   // mean ‖diag(p) − p·pᵀ‖_F
};
struct GrowthPoint {
  int dk = 0;
  double std_raw = 0, std_scaled = 0;  // of the keys·trials scores
  SoftmaxStats raw, scaled;            // softmax of q·k and of q·k/√d_k
};
// Deterministic in (dk, cfg): the same point whether computed alone or in a curve.
// `samples` (optional) receives the keys·trials raw scores.
GrowthPoint growth_point(int dk, const GrowthConfig& cfg, std::vector<double>* samples = nullptr);
// 1, 2, 4, ... up to dk_max (dk_max itself last even when not a power of two).
std::vector<int> growth_dks(int dk_max);
std::vector<GrowthPoint> growth_curve(int dk_max, const GrowthConfig& cfg);

// ---- Endpoints: request object → response object; throw ApiError.
nlohmann::json info();
nlohmann::json scale(const nlohmann::json& req);
nlohmann::json softmax_story(const nlohmann::json& req);
nlohmann::json growth(const nlohmann::json& req);
nlohmann::json curve(const nlohmann::json& req);
nlohmann::json attention_map(const nlohmann::json& req);
nlohmann::json misconceptions(const nlohmann::json& req);

// One API call: method "GET"/"POST", path "/api/...", the raw request body.
// Never throws: errors become 400 (bad request), 404 (no such endpoint),
// 405 (wrong method), 413 (body over kMaxBodyBytes) or 500, each with a JSON
// body {"error": ..., "field": ...}.
struct Response {
  int status = 200;
  std::string body;  // JSON
};
Response handle(std::string_view method, std::string_view path, std::string_view body);
// The JSON error body the server uses for its own errors (404, 413, ...).
std::string error_body(std::string_view message, std::string_view field = {});

// ---- The page: a fixed set of files embedded at build time from web/.
struct Asset {
  std::string_view path;          // "/index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};
// Every embedded file (defined in the generated web_assets.cpp).
std::span<const Asset> assets();
// The asset served at `path` ("/" is "/index.html"); nullptr for anything else.
const Asset* find_asset(std::string_view path);

}  // namespace sdpa::explorer
