#include "cli_util.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "commands.h"
#include "sdpa/attention.h"

namespace sdpa::cli {
namespace {

// The one table from the arguments named in an sdpa::Error to the command
// line: the flag that supplied the value, and the exit code of the run.
//
//   exit 2 (usage error): the value came from the user, as a flag or as a file
//          whose shape, type or content does not fit (bad shapes, a bad --scale,
//          an --isa this CPU lacks, unsorted --cu-seqlens-q, ...)
//   exit 1 (failure): an output the command allocates itself (too large to
//          hold), and every argument not listed here, or none (I/O and the like)
//
// The library names its arguments after its API (q, mask, window_left, ...),
// sdpa::onnx after the operator (Q, attn_mask, left_window_size, ...); `sdpa
// run` takes the first kind of flags and `sdpa onnx` the second.
struct Route {
  const char* arg;
  const char* flag;
  int exit_code;
};

constexpr Route kRoutes[] = {
    // sdpa::attention, reference_attention and the serving calls.
    {"q", "--q", kExitUsage},
    {"k", "--k", kExitUsage},
    {"v", "--v", kExitUsage},
    {"o", "--out", kExitFailure},
    {"lse", "--lse", kExitFailure},
    {"probs", "--probs", kExitFailure},
    {"scale", "--scale", kExitUsage},
    {"softcap", "--softcap", kExitUsage},
    {"window_left", "--window-left", kExitUsage},
    {"window_right", "--window-right", kExitUsage},
    {"threads", "--threads", kExitUsage},
    {"isa", "--isa", kExitUsage},
    {"SDPA_ISA", "SDPA_ISA", kExitUsage},
    {"cu_seqlens_q", "--cu-seqlens-q", kExitUsage},
    {"cu_seqlens_k", "--cu-seqlens-k", kExitUsage},
    {"mask", "--mask", kExitUsage},
    {"alibi_slopes", "--alibi-slopes", kExitUsage},
    {"sinks", "--sinks", kExitUsage},
    {"align", "--align", kExitUsage},
    {"dropout_p", "--dropout", kExitUsage},
    {"dropout_seed", "--seed", kExitUsage},
    {"dropout_offset", "--dropout-offset", kExitUsage},
    {"dropout_mask", "--dropout-mask", kExitFailure},
    // The backward: dO is an input, the gradients are outputs.
    {"d_o", "--do", kExitUsage},
    {"dq", "--dq", kExitFailure},
    {"dk", "--dk", kExitFailure},
    {"dv", "--dv", kExitFailure},
    {"dsinks", "--dsinks", kExitFailure},
    // sdpa::onnx::attention: inputs, outputs, attributes.
    {"Q", "--Q", kExitUsage},
    {"K", "--K", kExitUsage},
    {"V", "--V", kExitUsage},
    {"attn_mask", "--attn-mask", kExitUsage},
    {"past_key", "--past-key", kExitUsage},
    {"past_value", "--past-value", kExitUsage},
    {"nonpad_kv_seqlen", "--nonpad-kv-seqlen", kExitUsage},
    {"Y", "--Y", kExitFailure},
    {"present_key", "--present-key", kExitFailure},
    {"present_value", "--present-value", kExitFailure},
    {"qk_matmul_output", "--qk-matmul-output", kExitFailure},
    {"opset", "--opset", kExitUsage},
    {"is_causal", "--is-causal", kExitUsage},
    {"scale", "--scale", kExitUsage},
    {"softcap", "--softcap", kExitUsage},
    {"q_num_heads", "--q-num-heads", kExitUsage},
    {"kv_num_heads", "--kv-num-heads", kExitUsage},
    {"softmax_precision", "--softmax-precision", kExitUsage},
    {"qk_matmul_output_mode", "--qk-matmul-output-mode", kExitUsage},
    {"left_window_size", "--left-window-size", kExitUsage},
    {"right_window_size", "--right-window-size", kExitUsage},
};

}  // namespace

ErrorRoute route_of(std::string_view arg) {
  for (const Route& r : kRoutes)
    if (arg == r.arg) return {r.flag, r.exit_code};
  return {std::string(arg), kExitFailure};
}

CliError cli_error(const Error& e, std::string_view file, std::string_view note) {
  if (e.arg().empty()) return CliError(kExitFailure, e.what());
  const ErrorRoute r = route_of(e.arg());
  const std::string who = file.empty() ? r.flag : fmt::format("{} {}", r.flag, file);
  return CliError(r.exit_code, fmt::format("{}: expected {}, got {}{}", who, e.expected(), e.got(), note));
}

std::string isa_choices() {
  std::string s = "auto";
  for (Isa isa : compiled_isas()) s += fmt::format(", {}", isa_name(isa));
  return s;
}

double parse_finite_double(std::string_view flag, const std::string& text) {
  // strtod rather than from_chars: it accepts the forms people type ("1e3", "+2", ".5").
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double x = text.empty() ? 0.0 : std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || std::isspace(static_cast<unsigned char>(text.front()))) {
    throw UsageError(fmt::format("{}: expected a number, got '{}'", flag, text));
  }
  if (!std::isfinite(x)) throw UsageError(fmt::format("{}: expected a finite number, got '{}'", flag, text));
  if (errno == ERANGE) throw UsageError(fmt::format("{}: expected a number in double range, got '{}'", flag, text));
  return x;
}

float parse_float32(std::string_view flag, const std::string& text) {
  const double x = parse_finite_double(flag, text);
  const float f = static_cast<float>(x);
  if (!std::isfinite(f) || (f == 0.0f && x != 0.0))
    throw UsageError(fmt::format("{}: expected a number representable in float32, got '{}'", flag, text));
  return f;
}

std::int64_t parse_integer(std::string_view flag, const std::string& text) {
  return parse_integer(flag, text, std::numeric_limits<std::int64_t>::min());
}

int parse_int(std::string_view flag, const std::string& text) {
  const std::int64_t x = parse_integer(flag, text);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    throw UsageError(fmt::format("{}: expected an integer that fits in int, got '{}'", flag, text));
  return static_cast<int>(x);
}

std::int64_t parse_integer(std::string_view flag, const std::string& text, std::int64_t min) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  // from_chars rejects a leading '+'; accept it as people write it.
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(fmt::format("{}: expected an integer >= {}, got '{}' (out of range)", flag, min, text));
  }
  if (ec != std::errc() || ptr != end || begin == end) {
    throw UsageError(fmt::format("{}: expected an integer >= {}, got '{}'", flag, min, text));
  }
  if (value < min) throw UsageError(fmt::format("{}: expected an integer >= {}, got {}", flag, min, value));
  return value;
}

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::uint64_t>::max();
  return mul_sat(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page));
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == std::numeric_limits<std::uint64_t>::max()) return "more than 16 EiB";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024 && u < 6) {
    x /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", x, kUnits[u]);
}

void check_fits_memory(std::string_view flag, std::string_view value, std::uint64_t bytes, std::string_view what) {
  const std::uint64_t have = physical_memory_bytes();
  if (bytes <= have) return;
  throw UsageError(fmt::format("{}: expected a size whose arrays fit in memory ({} on this machine), got {} ({} of {})",
                               flag, format_bytes(have), value, format_bytes(bytes), what));
}

std::string format_number(double x) {
  if (!std::isfinite(x)) return fmt::format("{}", x);
  const double ax = std::fabs(x);
  if (ax >= 1e15 || (ax > 0 && ax < 1e-4)) return fmt::format("{:.4g}", x);
  if (x == std::trunc(x)) return fmt::format("{:.0f}", x == 0 ? 0.0 : x);  // no "-0"
  std::string s = fmt::format("{:.4f}", x);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string format_fixed(double x, int decimals) {
  if (!std::isfinite(x)) return fmt::format("{}", x);
  const double ax = std::fabs(x);
  // Tiny nonzero values would print as 0.0000 and hide what the demo shows.
  if (ax >= 1e15 || (ax > 0 && ax < 0.5 * std::pow(10.0, -decimals))) return fmt::format("{:.{}e}", x, 1);
  return fmt::format("{:.{}f}", x, decimals);
}

std::size_t display_width(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render(int indent) const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = display_width(columns_[c].header);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  // Padding is done here rather than with fmt's width, which counts UTF-8
  // code points differently across fmt versions.
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out(static_cast<std::size_t>(indent), ' ');
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::size_t pad = width[c] - display_width(cells[c]);
      const bool last = c + 1 == cells.size();
      if (columns_[c].align == Justify::right) out.append(pad, ' ');
      out += cells[c];
      if (columns_[c].align == Justify::left && !last) out.append(pad, ' ');
      if (!last) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::vector<std::string> headers, rules;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    headers.push_back(columns_[c].header);
    // An untitled column (a margin note) gets no rule either.
    rules.emplace_back(columns_[c].header.empty() ? 0 : width[c], '-');
  }
  // A table whose headers are all empty is a plain aligned list: no header lines.
  const bool headed = std::any_of(columns_.begin(), columns_.end(), [](const Column& c) { return !c.header.empty(); });
  std::string out = headed ? line(headers) + line(rules) : std::string();
  for (const auto& row : rows_) out += line(row);
  return out;
}

}  // namespace sdpa::cli
