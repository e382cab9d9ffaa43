// The explorer's JSON API: why attention scores are divided by √d_k.
//
// Every endpoint is a plain function from a request object to a response
// object, so tests call them without a socket; `sdpa serve` (serve.cpp) only
// wires handle() and find_asset() to HTTP. All numbers the page shows come
// from here. scale, softmax, growth and curve, and checks 1, 3 and 4 of
// misconceptions, are the teaching maths in double (teaching_math.h); the
// attention maps (attention, real_head) and check 2 of misconceptions (the
// scale read back from the output) are sdpa::attention calls.
//
// One idea per file: json_fields.{h,cpp} reads and checks request fields,
// rng.h draws the seeded numbers, teaching_math.{h,cpp} is the maths,
// explorer_api.cpp the endpoints and routing, work_gate.cpp the admission of
// costly calls, host_check.cpp the Host-header guard.
//
//   GET  /api/info            limits, defaults, the kernel ISA
//   POST /api/scale           {score, dk}                     → √d_k, score ÷ √d_k
//   POST /api/softmax         {scores, labels?, dk}           → weights and ranks, raw vs scaled
//   POST /api/growth          {dk, seed?, keys?, trials?, bins?} → histogram and softmax statistics at d_k
//   POST /api/curve           {dk_max?, seed?, keys?, trials?} → the same statistics over d_k = 1, 2, 4, ...
//   POST /api/attention       {tokens, d?, dv?, seed?, causal?, q?, k?, v?} → attention maps with and without scaling
//   POST /api/misconceptions  {scores?, dk?, big_dk?, seed?}  → live checks of common misunderstandings
//   POST /api/head            {tokens, q, k, v, causal?}      → attention's answer for entered Q, K, V with
//                                                                value rows up to d long (a real model's head)
//
// A bad request is answered with HTTP 400 and {"error": "dk: expected ...", "field": "dk"}.
// A request whose work exceeds kMaxWork is a bad request too (400 naming
// "trials", or "keys" when trials was not given). growth, curve and
// misconceptions are the costly endpoints: behind a WorkGate (as `sdpa serve`
// runs them) only a few run at once and a few more wait; the rest are
// answered 503 with Retry-After at once, so that cheap requests keep their
// threads and cores.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
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
// The growth experiment's work per request: random scores q·k drawn, each a
// d_k-long dot product, i.e. d_k·keys·trials (summed over the d_k of a curve).
// 2^24 allows every d_k and key count at the default 256 trials; each field's
// own limit above still holds.
inline constexpr std::int64_t kMaxWork = std::int64_t{1} << 24;

// A request the API refuses: `field` names the offending top-level field
// ("dk", "scores", "body" for a malformed or oversized body).
class ApiError : public std::runtime_error {
 public:
  ApiError(std::string field, const std::string& message) : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// ---- Endpoints: request object → response object; throw ApiError.
nlohmann::json info();
nlohmann::json scale(const nlohmann::json& req);
nlohmann::json softmax_story(const nlohmann::json& req);
nlohmann::json growth(const nlohmann::json& req);
nlohmann::json curve(const nlohmann::json& req);
nlohmann::json attention_map(const nlohmann::json& req);
nlohmann::json misconceptions(const nlohmann::json& req);
nlohmann::json real_head(const nlohmann::json& req);

// Admission for the costly endpoints: at most `running` at once, at most
// `waiting` more waiting (each at most `max_wait`) for a turn.
class WorkGate {
 public:
  WorkGate(int running, int waiting, std::chrono::milliseconds max_wait = std::chrono::seconds(10));
  WorkGate(const WorkGate&) = delete;
  WorkGate& operator=(const WorkGate&) = delete;

  // A turn to run; false when the queue was full or the wait ran out.
  class Turn {
   public:
    Turn() = default;
    Turn(Turn&& o) noexcept : gate_(std::exchange(o.gate_, nullptr)) {}
    Turn& operator=(Turn&&) = delete;
    ~Turn();
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    friend class WorkGate;
    explicit Turn(WorkGate* gate) : gate_(gate) {}
    WorkGate* gate_ = nullptr;
  };
  Turn enter();

  int running_limit() const { return max_running_; }
  int waiting_limit() const { return max_waiting_; }
  int running() const;
  int waiting() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable turn_free_;
  int running_ = 0, waiting_ = 0;
  const int max_running_, max_waiting_;
  const std::chrono::milliseconds max_wait_;
};

// One API call: method "GET"/"POST", path "/api/...", the raw request body.
// Never throws: errors become 400 (bad request), 404 (no such endpoint),
// 405 (wrong method), 413 (body over kMaxBodyBytes), 503 (the gate turned a
// costly call away, its request valid; retry_after set) or 500, each with a JSON body
// {"error": ..., "field": ...}. Without a gate every call runs at once.
struct Response {
  int status = 200;
  std::string body;     // JSON
  int retry_after = 0;  // seconds, for a 503
};
Response handle(std::string_view method, std::string_view path, std::string_view body, WorkGate* gate = nullptr);
// The JSON error body the server uses for its own errors (404, 413, ...).
std::string error_body(std::string_view message, std::string_view field = {});

// ---- Which requests `sdpa serve --host <host>` answers: the DNS-rebinding guard.
//
// A page on another site can make a browser send requests to this server
// through a DNS name of its own that resolves to 127.0.0.1; the request then
// carries that name in its Host header. Only exact names are accepted:
// localhost, a dotted-quad address in 127.0.0.0/8, [::1] (any spelling of
// that address), the --host the server was started with, and for a wildcard
// --host (0.0.0.0, ::) this machine's host name and interface addresses; each
// with an optional port 1-65535. Everything else is refused: a longer name
// (127.0.0.1.evil.com, localhost.evil), a trailing dot, userinfo
// (127.0.0.1@evil), short or octal IPv4 forms, a bad port, an empty value.
class HostCheck {
 public:
  explicit HostCheck(const std::string& host);
  bool host_ok(std::string_view value) const;
  // An Origin header (sent by browsers with every POST) must be http:// and a name host_ok accepts.
  bool origin_ok(std::string_view value) const;

 private:
  std::set<std::string> own_;
};

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
