// Helpers shared by the subcommands: strict flag-value parsing (bad values are
// usage errors naming the flag), the --isa choices, number formatting for
// people and aligned text tables. The teaching maths (softmax, entropy, ...)
// is teaching_math.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sdpa/options.h"

namespace sdpa::cli {

// The --isa values this build accepts ("auto, scalar, avx2, avx512, avx512bf16, amx"), for help texts.
std::string isa_choices();

// Parses the whole of `text` as a finite double; throws UsageError naming `flag`.
double parse_finite_double(std::string_view flag, const std::string& text);
// Parses the whole of `text` as a base-10 integer >= `min`; throws UsageError naming `flag`.
std::int64_t parse_integer(std::string_view flag, const std::string& text, std::int64_t min);
// The same for any int64 value: only the syntax is the command line's, the
// range is checked by whoever takes the value (the library, sdpa::onnx).
std::int64_t parse_integer(std::string_view flag, const std::string& text);
// Any int (Options::threads is one).
int parse_int(std::string_view flag, const std::string& text);
// A finite number that float32 can hold (ONNX's float attributes).
float parse_float32(std::string_view flag, const std::string& text);

// Sizes that flags imply, in bytes, without overflow: products saturate at
// UINT64_MAX (which no machine holds).
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b);
std::uint64_t add_sat(std::uint64_t a, std::uint64_t b);
// The physical memory of this machine in bytes (UINT64_MAX when unknown).
std::uint64_t physical_memory_bytes();
// A usage error naming `flag` unless `bytes` of `what` fit in physical memory:
// "--n: expected sizes whose arrays fit in memory (16.0 GiB), got 1000000000 (4.0 TiB of q, k, v, o)".
void check_fits_memory(std::string_view flag, std::string_view value, std::uint64_t bytes, std::string_view what);
// A byte count for people: "512 B", "1.5 KiB", ..., "16.0 EiB".
std::string format_bytes(std::uint64_t bytes);

// An integer-valued x without decimals ("64"), otherwise up to 4 decimals with
// trailing zeros dropped ("1.4142", "12.5"); very large or tiny magnitudes in
// scientific notation so the text stays short.
std::string format_number(double x);
// x with exactly `decimals` decimals, or scientific notation for magnitudes
// where fixed notation would be unreadable.
std::string format_fixed(double x, int decimals);

// Display width of UTF-8 text: one column per code point ("√" is one column).
std::size_t display_width(std::string_view s);

enum class Justify { left, right };

// A text table: columns padded to their widest cell, a rule under the header
// (no header lines when every header is empty).
class Table {
 public:
  struct Column {
    std::string header;
    Justify align = Justify::right;
  };
  explicit Table(std::vector<Column> columns);
  void add_row(std::vector<std::string> cells);
  // Each line starts with `indent` spaces and ends with '\n'.
  std::string render(int indent = 2) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace sdpa::cli
