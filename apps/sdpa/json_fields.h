// The explorer API's request fields: each getter reads one top-level field
// of a JSON request, checks its type and range, and throws ApiError naming the
// field, what was expected and what was given:
//   "dk: expected an integer in [1, 1024], got 2000"
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "explorer_api.h"

namespace sdpa::explorer::fields {

using json = nlohmann::json;

// A JSON value for a message, cut to 40 characters.
std::string show(const json& v);
// Rejects fields the endpoint does not know (a typo would otherwise be silently ignored).
void check_fields(const json& req, std::initializer_list<std::string_view> allowed);
// The field, or nullptr when it is absent or null.
const json* find(const json& req, const char* name);

// One value (an array entry, a matrix cell): `where` names it in the message
// ("scores[2]"), `field` is the top-level field the error names.
std::int64_t as_int(const json& v, const std::string& where, const std::string& field, std::int64_t lo,
                    std::int64_t hi);
double as_double(const json& v, const std::string& where, const std::string& field, double lo, double hi);
std::string as_label(const json& v, const std::string& where, const std::string& field, std::size_t max_bytes);
const json& as_array(const json& v, const char* name, std::size_t min_size, std::size_t max_size);

std::int64_t get_int(const json& req, const char* name, std::int64_t lo, std::int64_t hi, std::int64_t fallback);
// An integer in [0, kMaxSeed] (exact in a JavaScript number).
std::uint64_t get_seed(const json& req, const char* name, std::uint64_t fallback);
double get_double(const json& req, const char* name, double lo, double hi, double fallback);
bool get_bool(const json& req, const char* name, bool fallback);
// An array of min_size to max_size numbers in [lo, hi].
std::vector<double> get_numbers(const json& req, const char* name, std::size_t min_size, std::size_t max_size,
                                double lo, double hi, std::vector<double> fallback);
// An array of min_size to max_size printable strings of 1 to max_bytes bytes.
std::vector<std::string> get_labels(const json& req, const char* name, std::size_t min_size, std::size_t max_size,
                                    std::size_t max_bytes, std::vector<std::string> fallback);
// A rows × cols matrix of numbers in [-kMaxAbsEntry, kMaxAbsEntry]; cols == 0 takes it from the first row.
std::vector<double> get_matrix(const json& v, const char* name, std::size_t rows, std::size_t& cols,
                               std::size_t max_cols);

}  // namespace sdpa::explorer::fields
