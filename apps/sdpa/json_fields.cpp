// The explorer API's request fields (see json_fields.h).
#include "json_fields.h"

#include <algorithm>
#include <cmath>

namespace sdpa::explorer::fields {
namespace {

std::string show_number(double x) {
  json j = x;
  return j.dump();
}

}  // namespace

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
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

}  // namespace sdpa::explorer::fields
