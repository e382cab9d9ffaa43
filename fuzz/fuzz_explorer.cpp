// The explorer's JSON API. The first byte picks a method and endpoint, the
// rest is the request body. handle() must never throw, must answer with a
// status it documents and a JSON body, and never 500 (an unexpected
// exception inside a handler). A body that parses as JSON is also given to
// the endpoint's function directly, which may throw ApiError only.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "explorer_api.h"
#include "fuzz_util.h"

namespace {

struct Endpoint {
  const char* method;
  const char* path;
  nlohmann::json (*fn)(const nlohmann::json&);
};

nlohmann::json info_fn(const nlohmann::json&) { return sdpa::explorer::info(); }

const Endpoint kEndpoints[] = {
    {"GET", "/api/info", info_fn},
    {"POST", "/api/scale", sdpa::explorer::scale},
    {"POST", "/api/softmax", sdpa::explorer::softmax_story},
    {"POST", "/api/growth", sdpa::explorer::growth},
    {"POST", "/api/curve", sdpa::explorer::curve},
    {"POST", "/api/attention", sdpa::explorer::attention_map},
    {"POST", "/api/misconceptions", sdpa::explorer::misconceptions},
    {"POST", "/api/head", sdpa::explorer::real_head},
    {"GET", "/api/scale", nullptr},
    {"POST", "/api/nope", nullptr},
    {"PUT", "/api/softmax", nullptr},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Endpoint& ep = kEndpoints[data[0] % (sizeof kEndpoints / sizeof kEndpoints[0])];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

  const sdpa::explorer::Response r = sdpa::explorer::handle(ep.method, ep.path, body);
  if (r.status != 200 && r.status != 400 && r.status != 404 && r.status != 405 && r.status != 413) {
    std::fprintf(stderr, "fuzz: %s %s answered %d: %s\n", ep.method, ep.path, r.status, r.body.c_str());
    std::abort();
  }
  if (!nlohmann::json::accept(r.body)) sdpa::fuzz::fail("response body is not JSON");

  if (ep.fn == nullptr) return 0;
  const nlohmann::json req = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return 0;
  try {
    const nlohmann::json res = ep.fn(req);
    (void)res.dump();
  } catch (const sdpa::explorer::ApiError&) {
  }
  return 0;
}
