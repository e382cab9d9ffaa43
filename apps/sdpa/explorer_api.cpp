// The explorer's JSON API (see explorer_api.h).
#include "explorer_api.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numbers>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "sdpa/attention.h"

namespace sdpa::explorer {

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------- requests

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string show_number(double x) {
  json j = x;
  return j.dump();
}

// Rejects fields the endpoint does not know (a typo would otherwise be silently ignored).
void check_fields(const json& req, std::initializer_list<std::string_view> allowed) {
  for (const auto& item : req.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) != allowed.end()) continue;
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw ApiError(item.key(), item.key() + ": unknown field; expected one of " + list);
  }
}

const json* find(const json& req, const char* name) {
  auto it = req.find(name);
  if (it == req.end() || it->is_null()) return nullptr;
  return &*it;
}

std::int64_t as_int(const json& v, const std::string& where, const std::string& field, std::int64_t lo,
                    std::int64_t hi) {
  const std::string expected =
      "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  double x = 0;
  if (v.is_number_integer() || v.is_number_float()) {
    x = v.get<double>();
  } else {
    throw ApiError(field, where + ": expected " + expected + ", got " + show(v));
  }
  if (!std::isfinite(x) || x != std::floor(x) || x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
    throw ApiError(field, where + ": expected " + expected + ", got " + show(v));
  }
  if (v.is_number_unsigned()) return static_cast<std::int64_t>(v.get<std::uint64_t>());
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return static_cast<std::int64_t>(x);
}

std::int64_t get_int(const json& req, const char* name, std::int64_t lo, std::int64_t hi, std::int64_t fallback) {
  const json* v = find(req, name);
  return v ? as_int(*v, name, name, lo, hi) : fallback;
}

std::uint64_t get_seed(const json& req, const char* name, std::uint64_t fallback) {
  const json* v = find(req, name);
  return v ? static_cast<std::uint64_t>(as_int(*v, name, name, 0, static_cast<std::int64_t>(kMaxSeed))) : fallback;
}

double as_double(const json& v, const std::string& where, const std::string& field, double lo, double hi) {
  const std::string expected = "a number in [" + show_number(lo) + ", " + show_number(hi) + "]";
  if (!v.is_number()) throw ApiError(field, where + ": expected " + expected + ", got " + show(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) throw ApiError(field, where + ": expected " + expected + ", got " + show(v));
  return x;
}

double get_double(const json& req, const char* name, double lo, double hi, double fallback) {
  const json* v = find(req, name);
  return v ? as_double(*v, name, name, lo, hi) : fallback;
}

bool get_bool(const json& req, const char* name, bool fallback) {
  const json* v = find(req, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw ApiError(name, std::string(name) + ": expected true or false, got " + show(*v));
  return v->get<bool>();
}

const json& as_array(const json& v, const char* name, std::size_t min_size, std::size_t max_size) {
  if (!v.is_array() || v.size() < min_size || v.size() > max_size) {
    throw ApiError(name, std::string(name) + ": expected an array of " + std::to_string(min_size) + " to " +
                             std::to_string(max_size) + " entries, got " + show(v));
  }
  return v;
}

std::vector<double> get_numbers(const json& req, const char* name, std::size_t min_size, std::size_t max_size,
                                double lo, double hi, std::vector<double> fallback) {
  const json* v = find(req, name);
  if (!v) return fallback;
  const json& a = as_array(*v, name, min_size, max_size);
  std::vector<double> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    out.push_back(as_double(a[i], std::string(name) + "[" + std::to_string(i) + "]", name, lo, hi));
  }
  return out;
}

std::string as_label(const json& v, const std::string& where, const std::string& field, std::size_t max_bytes) {
  if (!v.is_string()) throw ApiError(field, where + ": expected a string, got " + show(v));
  std::string s = v.get<std::string>();
  if (s.empty() || s.size() > max_bytes) {
    throw ApiError(field, where + ": expected 1 to " + std::to_string(max_bytes) + " bytes of text, got " +
                              std::to_string(s.size()));
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) throw ApiError(field, where + ": expected printable text, got a control character");
  }
  return s;
}

std::vector<std::string> get_labels(const json& req, const char* name, std::size_t min_size, std::size_t max_size,
                                    std::size_t max_bytes, std::vector<std::string> fallback) {
  const json* v = find(req, name);
  if (!v) return fallback;
  const json& a = as_array(*v, name, min_size, max_size);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    out.push_back(as_label(a[i], std::string(name) + "[" + std::to_string(i) + "]", name, max_bytes));
  }
  return out;
}

// A rows × cols matrix of numbers in [-kMaxAbsEntry, kMaxAbsEntry]; cols == 0 takes it from the first row.
std::vector<double> get_matrix(const json& v, const char* name, std::size_t rows, std::size_t& cols,
                               std::size_t max_cols) {
  if (!v.is_array() || v.size() != rows) {
    throw ApiError(name, std::string(name) + ": expected " + std::to_string(rows) + " rows (one per token), got " +
                             (v.is_array() ? std::to_string(v.size()) + " rows" : show(v)));
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < rows; ++i) {
    const json& row = v[i];
    const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
    if (!row.is_array() || row.empty() || row.size() > max_cols || (cols != 0 && row.size() != cols)) {
      const std::string want = cols != 0 ? std::to_string(cols) : "1 to " + std::to_string(max_cols);
      throw ApiError(name, where + ": expected a row of " + want + " numbers, got " +
                               (row.is_array() ? std::to_string(row.size()) + " numbers" : show(row)));
    }
    cols = row.size();
    for (std::size_t c = 0; c < cols; ++c) {
      out.push_back(as_double(row[c], where + "[" + std::to_string(c) + "]", name, -kMaxAbsEntry, kMaxAbsEntry));
    }
  }
  return out;
}

// ---------------------------------------------------------------- admission

// A costly endpoint calls admit() once its request is validated (so a bad
// request is still a 400 when the server is busy) and before its work: under
// handle()'s gate it then waits for a turn, held until handle() returns, or
// throws Busy (503).
struct Busy {};
thread_local WorkGate* t_gate = nullptr;
thread_local std::optional<WorkGate::Turn>* t_turn = nullptr;

void admit() {
  if (t_gate == nullptr || t_turn == nullptr || t_turn->has_value()) return;
  t_turn->emplace(t_gate->enter());
  if (!**t_turn) throw Busy{};
}

// Makes `gate` the one admit() uses during one handle() call.
class Admission {
 public:
  explicit Admission(WorkGate* gate) : previous_gate_(t_gate), previous_turn_(t_turn) {
    t_gate = gate;
    t_turn = &turn_;
  }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() {
    t_gate = previous_gate_;
    t_turn = previous_turn_;
  }

 private:
  std::optional<WorkGate::Turn> turn_;
  WorkGate* previous_gate_;
  std::optional<WorkGate::Turn>* previous_turn_;
};

// ---------------------------------------------------------------- Host header

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// a.b.c.d, four decimal numbers 0-255 without leading zeros (no octal, hex or short forms).
std::optional<std::array<int, 4>> parse_ipv4(std::string_view s) {
  std::array<int, 4> out{};
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      if (s.empty() || s.front() != '.') return std::nullopt;
      s.remove_prefix(1);
    }
    std::size_t n = 0;
    while (n < s.size() && n < 4 && s[n] >= '0' && s[n] <= '9') ++n;
    if (n == 0 || n > 3 || (n > 1 && s[0] == '0')) return std::nullopt;
    int v = 0;
    for (std::size_t k = 0; k < n; ++k) v = v * 10 + (s[k] - '0');
    if (v > 255) return std::nullopt;
    out[static_cast<std::size_t>(i)] = v;
    s.remove_prefix(n);
  }
  if (!s.empty()) return std::nullopt;
  return out;
}

// An IPv6 address in its canonical text ("::1"), or nullopt.
std::optional<std::string> canonical_ipv6(const std::string& s) {
  in6_addr a{};
  if (inet_pton(AF_INET6, s.c_str(), &a) != 1) return std::nullopt;
  char buf[INET6_ADDRSTRLEN];
  if (!inet_ntop(AF_INET6, &a, buf, sizeof buf)) return std::nullopt;
  return std::string(buf);
}

// A Host header value as one comparable key: the lowercased name or dotted
// quad, or "[canonical IPv6]"; the port (1-65535, digits only, no leading
// zero) is checked and dropped. nullopt for anything malformed: userinfo,
// a path, a zone id, two colons outside brackets, an empty name or port.
std::optional<std::string> host_key(std::string_view value) {
  std::string_view host = value, port;
  bool bracketed = false;
  if (!value.empty() && value.front() == '[') {
    const std::size_t close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = value.substr(1, close - 1);
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      if (port.empty()) return std::nullopt;
    }
    bracketed = true;
  } else if (const std::size_t colon = value.find(':'); colon != std::string_view::npos) {
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (port.empty()) return std::nullopt;
  }
  if (!port.empty()) {
    if (port.size() > 5 || port.front() == '0') return std::nullopt;
    int v = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return std::nullopt;
  }
  if (host.empty()) return std::nullopt;
  if (bracketed) {
    const std::optional<std::string> v6 = canonical_ipv6(std::string(host));
    if (!v6) return std::nullopt;
    return "[" + *v6 + "]";
  }
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!ok) return std::nullopt;
  }
  return lowercase(host);
}

bool is_loopback_key(const std::string& key) {
  if (key == "localhost" || key == "[::1]") return true;
  const auto v4 = parse_ipv4(key);
  return v4 && (*v4)[0] == 127;
}

// The key of an address or name given to --host ("::1" is "[::1]").
std::string given_host_key(const std::string& host) {
  if (host.find(':') != std::string::npos) {
    const std::string bare = host.size() > 1 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
    if (const auto v6 = canonical_ipv6(bare)) return "[" + *v6 + "]";
  }
  return lowercase(host);
}

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host == "[::]"; }

// Every key a Host header may name on a server started with --host `host`.
std::set<std::string> own_host_keys(const std::string& host) {
  if (!is_wildcard(host)) return {given_host_key(host)};
  // Listening everywhere: the names a client on the network may use, not 0.0.0.0 itself.
  std::set<std::string> keys;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') keys.insert(lowercase(name));
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (a->ifa_addr->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
        if (in->sin_addr.s_addr != htonl(INADDR_ANY) && inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf)) {
          keys.insert(buf);
        }
      } else if (a->ifa_addr->sa_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
        if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) && !IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) && inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf)) {
          keys.insert("[" + std::string(buf) + "]");
        }
      }
    }
    freeifaddrs(list);
  }
  return keys;
}

// ---------------------------------------------------------------- randomness

// splitmix64: turns (seed, salt) into well-mixed generator seeds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// N(0, 1) by Box–Muller on mt19937_64 (whose output the standard fixes), so
// the same seed gives the same numbers with every standard library.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : gen_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 0;
    while (u1 <= 0) u1 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double u2 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// ---------------------------------------------------------------- helpers

json stats_json(std::span<const double> scores) {
  const std::vector<double> p = softmax(scores);
  const std::vector<double> lp = log_softmax(scores);
  return {{"probs", p},
          {"log_probs", lp},
          {"ranks", ranks(lp)},
          {"max_weight", *std::max_element(p.begin(), p.end())},
          {"entropy", entropy(p)},
          {"grad_norm", jacobian_norm(p)}};
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

// ---------------------------------------------------------------- softmax arithmetic

std::vector<double> log_softmax(std::span<const double> scores) {
  std::vector<double> out(scores.size());
  if (scores.empty()) return out;
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double s : scores) sum += std::exp(s - m);
  const double lse = m + std::log(sum);
  for (std::size_t i = 0; i < scores.size(); ++i) out[i] = scores[i] - lse;
  return out;
}

std::vector<double> softmax(std::span<const double> scores) {
  std::vector<double> p = log_softmax(scores);
  for (double& x : p) x = std::exp(x);
  return p;
}

double entropy(std::span<const double> p) {
  double h = 0;
  for (double x : p) {
    if (x > 0) h -= x * std::log(x);
  }
  return std::max(h, 0.0);
}

double jacobian_norm(std::span<const double> p) {
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (std::size_t j = 0; j < p.size(); ++j) {
      const double jij = (i == j ? p[i] : 0.0) - p[i] * p[j];
      sum += jij * jij;
    }
  }
  return std::sqrt(sum);
}

std::vector<int> ranks(std::span<const double> values) {
  std::vector<int> r(values.size(), 1);
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (double other : values) r[i] += other > values[i] ? 1 : 0;
  }
  return r;
}

// ---------------------------------------------------------------- experiment (c)

GrowthPoint growth_point(int dk, const GrowthConfig& cfg, std::vector<double>* samples) {
  if (dk < 1) throw ApiError("dk", "dk: expected an integer >= 1, got " + std::to_string(dk));
  Normal normal(mix(cfg.seed ^ mix(static_cast<std::uint64_t>(dk))));
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> q(static_cast<std::size_t>(dk)), raw(static_cast<std::size_t>(cfg.keys)),
      scaled(static_cast<std::size_t>(cfg.keys));
  double sum = 0, sum_sq = 0;
  GrowthPoint pt;
  pt.dk = dk;
  if (samples) samples->clear();
  auto add = [](SoftmaxStats& acc, std::span<const double> s) {
    const std::vector<double> p = softmax(s);
    acc.max_weight += *std::max_element(p.begin(), p.end());
    acc.entropy += entropy(p);
    acc.grad_norm += jacobian_norm(p);
  };
  for (int t = 0; t < cfg.trials; ++t) {
    for (double& x : q) x = normal();
    for (int j = 0; j < cfg.keys; ++j) {
      double dot = 0;
      for (int c = 0; c < dk; ++c) dot += q[static_cast<std::size_t>(c)] * normal();
      raw[static_cast<std::size_t>(j)] = dot;
      scaled[static_cast<std::size_t>(j)] = dot * inv_sqrt;
      sum += dot;
      sum_sq += dot * dot;
      if (samples) samples->push_back(dot);
    }
    add(pt.raw, raw);
    add(pt.scaled, scaled);
  }
  const double n = static_cast<double>(cfg.trials) * cfg.keys;
  const double mean = sum / n;
  pt.std_raw = std::sqrt(std::max(sum_sq / n - mean * mean, 0.0));
  pt.std_scaled = pt.std_raw * inv_sqrt;
  for (SoftmaxStats* s : {&pt.raw, &pt.scaled}) {
    s->max_weight /= cfg.trials;
    s->entropy /= cfg.trials;
    s->grad_norm /= cfg.trials;
  }
  return pt;
}

std::vector<int> growth_dks(int dk_max) {
  std::vector<int> dks;
  for (int dk = 1; dk <= dk_max; dk *= 2) {
    dks.push_back(dk);
    if (dk > std::numeric_limits<int>::max() / 2) break;
  }
  if (dks.empty() || dks.back() != dk_max) dks.push_back(dk_max);
  return dks;
}

std::vector<GrowthPoint> growth_curve(int dk_max, const GrowthConfig& cfg) {
  std::vector<GrowthPoint> out;
  for (int dk : growth_dks(dk_max)) out.push_back(growth_point(dk, cfg));
  return out;
}

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
  const GrowthPoint pt = growth_point(dk, cfg, &samples);
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
  for (int dk : growth_dks(dk_max)) dks_sum += dk;
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
  json points = json::array();
  for (const GrowthPoint& p : growth_curve(dk_max, cfg)) points.push_back(point_json(p));
  json out = {{"keys", cfg.keys},
              {"trials", cfg.trials},
              {"seed", cfg.seed},
              {"max_entropy", std::log(static_cast<double>(cfg.keys))},
              {"points", std::move(points)}};
  std::lock_guard lock(mutex);
  if (cache.size() >= 16) cache.clear();
  cache.emplace(key, out);
  return out;
}

json attention_map(const json& req) {
  check_fields(req, {"tokens", "d", "dv", "seed", "causal", "q", "k", "v"});
  const std::vector<std::string> tokens =
      get_labels(req, "tokens", 1, kMaxTokens, kMaxTokenBytes, {"Tom", "lives", "in", "New York"});
  const std::size_t n = tokens.size();
  const bool causal = get_bool(req, "causal", false);
  const std::uint64_t seed = get_seed(req, "seed", 7);
  const bool entered = find(req, "q") || find(req, "k") || find(req, "v");
  std::size_t d = static_cast<std::size_t>(get_int(req, "d", 1, kMaxHeadDim, 16));
  std::size_t dv = static_cast<std::size_t>(get_int(req, "dv", 1, kMaxValueDim, 4));
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
    v = get_matrix(req["v"], "v", n, dv, kMaxValueDim);
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
  const GrowthPoint small = growth_point(1, cfg), big = growth_point(big_dk, cfg);

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

// ---------------------------------------------------------------- admission

WorkGate::WorkGate(int running, int waiting, std::chrono::milliseconds max_wait)
    : max_running_(std::max(running, 1)), max_waiting_(std::max(waiting, 0)), max_wait_(max_wait) {}

WorkGate::Turn WorkGate::enter() {
  std::unique_lock lock(mutex_);
  if (running_ < max_running_ && waiting_ == 0) {
    ++running_;
    return Turn(this);
  }
  if (waiting_ >= max_waiting_) return Turn();
  ++waiting_;
  const bool got = turn_free_.wait_for(lock, max_wait_, [&] { return running_ < max_running_; });
  --waiting_;
  if (!got) return Turn();
  ++running_;
  return Turn(this);
}

int WorkGate::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

int WorkGate::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

WorkGate::Turn::~Turn() {
  if (!gate_) return;
  {
    std::lock_guard lock(gate_->mutex_);
    --gate_->running_;
  }
  gate_->turn_free_.notify_one();
}

// ---------------------------------------------------------------- Host header

HostCheck::HostCheck(const std::string& host) : own_(own_host_keys(host)) {}

bool HostCheck::host_ok(std::string_view value) const {
  const std::optional<std::string> key = host_key(value);
  return key && (is_loopback_key(*key) || own_.count(*key) != 0);
}

bool HostCheck::origin_ok(std::string_view value) const {
  constexpr std::string_view scheme = "http://";
  if (value.substr(0, scheme.size()) != scheme) return false;
  return host_ok(value.substr(scheme.size()));
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
