// The DNS-rebinding guard of `sdpa serve`: HostCheck (see explorer_api.h).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstring>
#include <optional>

#include "explorer_api.h"

namespace sdpa::explorer {
namespace {

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

}  // namespace

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

}  // namespace sdpa::explorer
