// NumPy .npy reader and writer.
//
// Layout of a file (numpy.lib.format):
//   "\x93NUMPY" major minor  HEADER_LEN  header-dict  data
// HEADER_LEN is a little-endian uint16 in version 1.0 and uint32 in 2.0/3.0.
// The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a final '\n' so that the data starts on a 64-byte
// boundary.
//
// Design:
//  * Files are untrusted input. Every size is checked against the number of
//    bytes actually present before anything is allocated, and element/byte
//    counts are computed with overflow checks, so a hostile header can neither
//    crash the reader nor make it allocate a huge buffer.
//  * The header is parsed by a small recursive-descent parser for the subset of
//    Python literals that can appear in it (strings, ints, True/False/None,
//    tuples, lists, dicts), with a nesting limit. Parsing the real grammar
//    rather than pattern-matching the text numpy happens to write keeps us
//    compatible with other writers (double quotes, other key order, missing
//    trailing comma) and lets structured dtypes be reported as "unsupported"
//    rather than "unparsable".
//  * Only what sdpa uses is accepted: little-endian, C-order, simple dtypes.
//    Everything else is rejected with a message naming the file, what was
//    expected and what was found.
//  * Writes are atomic: data goes to a uniquely named temporary file in the
//    destination folder, is fsynced, then renamed over the destination, so a
//    reader never sees a partial file and a failed write leaves the old file.
#include "io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>

namespace sdpa::io {

// '=' (native) byte order is read as little-endian.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::size_t kAlign = 64;
// Nesting deeper than this cannot be a real header; the limit bounds recursion.
constexpr int kMaxNesting = 16;

// Renders bytes for an error message: printable ASCII as is, the rest as \xNN,
// cut to `limit` characters so a huge header cannot flood the message.
std::string printable(std::string_view s, std::size_t limit = 160) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string errno_message(int err) { return std::system_category().message(err); }

// ---------------------------------------------------------------------------
// Python literal parser

struct PyValue {
  enum class Kind { str, integer, boolean, none, tuple, list, dict };
  Kind kind = Kind::none;
  std::string str;
  std::int64_t integer = 0;
  bool boolean = false;
  // Elements of a tuple or list; for a dict, keys and values alternate.
  std::vector<PyValue> items;
};

std::string quote(std::string_view s) { return "'" + printable(s, 60) + "'"; }

std::string repr(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::str: return quote(v.str);
    case PyValue::Kind::integer: return std::to_string(v.integer);
    case PyValue::Kind::boolean: return v.boolean ? "True" : "False";
    case PyValue::Kind::none: return "None";
    case PyValue::Kind::tuple:
    case PyValue::Kind::list: {
      const bool tuple = v.kind == PyValue::Kind::tuple;
      std::string s = tuple ? "(" : "[";
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) s += ", ";
        s += repr(v.items[i]);
        if (s.size() > 200) return s + "...";
      }
      if (tuple && v.items.size() == 1) s += ",";
      return s + (tuple ? ")" : "]");
    }
    case PyValue::Kind::dict: {
      std::string s = "{";
      for (std::size_t i = 0; i + 1 < v.items.size(); i += 2) {
        if (i > 0) s += ", ";
        s += repr(v.items[i]) + ": " + repr(v.items[i + 1]);
        if (s.size() > 200) return s + "...";
      }
      return s + "}";
    }
  }
  return "?";
}

class LiteralParser {
 public:
  LiteralParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  // The whole text must be one literal, optionally surrounded by whitespace.
  PyValue parse_document() {
    skip_space();
    PyValue v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the closing brace");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(name_, "a Python dict literal as the .npy header",
                "\"" + printable(text_) + "\" (" + what + " at offset " + std::to_string(pos_) + ")");
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  PyValue parse_value(int depth) {
    if (depth > kMaxNesting) fail("nesting too deep");
    if (at_end()) fail("unexpected end of header");
    const char c = peek();
    if (c == '\'' || c == '"') return parse_string();
    if (c == '-' || c == '+' || (c >= '0' && c <= '9')) return parse_int();
    if (c == '(') return parse_sequence(depth, ')', PyValue::Kind::tuple);
    if (c == '[') return parse_sequence(depth, ']', PyValue::Kind::list);
    if (c == '{') return parse_dict(depth);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return parse_name();
    fail(std::string("unexpected character '") + printable(std::string_view(&text_[pos_], 1)) + "'");
  }

  PyValue parse_string() {
    const char q = peek();
    ++pos_;
    PyValue v;
    v.kind = PyValue::Kind::str;
    while (true) {
      if (at_end() || peek() == '\n') fail("unterminated string");
      char c = text_[pos_++];
      if (c == q) break;
      if (c == '\\') {
        if (at_end()) fail("unterminated string");
        c = text_[pos_++];
        // Only the escapes that can matter in a dtype string are decoded.
        if (c == 'n') c = '\n';
        else if (c == 't') c = '\t';
        else if (c != '\\' && c != '\'' && c != '"') v.str += '\\';
      }
      v.str += c;
    }
    return v;
  }

  PyValue parse_int() {
    bool negative = false;
    if (peek() == '-' || peek() == '+') {
      negative = peek() == '-';
      ++pos_;
    }
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit");
    std::int64_t value = 0;
    while (!at_end() && ((peek() >= '0' && peek() <= '9') || peek() == '_')) {
      const char c = text_[pos_++];
      if (c == '_') continue;
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value)) {
        fail("integer does not fit in int64");
      }
    }
    // Python 2 era numpy wrote shapes like (3L, 4L).
    if (peek() == 'L' || peek() == 'l') ++pos_;
    PyValue v;
    v.kind = PyValue::Kind::integer;
    v.integer = negative ? -value : value;
    return v;
  }

  PyValue parse_name() {
    const std::size_t start = pos_;
    while (!at_end()) {
      const char c = peek();
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) break;
      ++pos_;
    }
    const std::string_view word = text_.substr(start, pos_ - start);
    PyValue v;
    if (word == "True" || word == "False") {
      v.kind = PyValue::Kind::boolean;
      v.boolean = word == "True";
    } else if (word == "None") {
      v.kind = PyValue::Kind::none;
    } else {
      pos_ = start;
      fail("unknown name '" + printable(word, 40) + "'");
    }
    return v;
  }

  // Tuples and lists; "(x)" without a comma is a parenthesised value, as in Python.
  PyValue parse_sequence(int depth, char close, PyValue::Kind kind) {
    ++pos_;
    PyValue v;
    v.kind = kind;
    bool saw_comma = false;
    skip_space();
    while (peek() != close) {
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        saw_comma = true;
        ++pos_;
        skip_space();
      } else if (peek() != close) {
        fail(std::string("expected ',' or '") + close + "'");
      }
    }
    ++pos_;
    if (kind == PyValue::Kind::tuple && v.items.size() == 1 && !saw_comma) {
      PyValue inner = std::move(v.items.front());
      return inner;
    }
    return v;
  }

  PyValue parse_dict(int depth) {
    ++pos_;
    PyValue v;
    v.kind = PyValue::Kind::dict;
    skip_space();
    while (peek() != '}') {
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      expect(':');
      skip_space();
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        fail("expected ',' or '}'");
      }
    }
    ++pos_;
    return v;
  }

  std::string_view text_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// Header interpretation

constexpr const char* kSupportedDescrs = "'<f4', '<f8', '<f2', '|b1', '|i1', '<i4' or '<i8'";

struct Header {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::int64_t numel = 1;
  std::int64_t nbytes = 0;
};

std::string shape_repr(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

DType parse_descr(const PyValue& v, const std::string& name) {
  if (v.kind != PyValue::Kind::str) {
    throw Error(name, "a simple dtype string (" + std::string(kSupportedDescrs) + ") for 'descr'",
                repr(v) + " (structured and sub-array dtypes are not supported)");
  }
  const std::string& d = v.str;
  if (d.size() == 3) {
    const char order = d[0];
    const std::string_view type = std::string_view(d).substr(1);
    const bool little = order == '<' || order == '=';
    const bool big = order == '>' || order == '!';
    if (type == "b1" && (little || big || order == '|')) return DType::boolean;
    if (type == "i1" && (little || big || order == '|')) return DType::i8;
    DType t{};
    bool known = true;
    if (type == "f4") t = DType::f32;
    else if (type == "f8") t = DType::f64;
    else if (type == "f2") t = DType::f16;
    else if (type == "i4") t = DType::i32;
    else if (type == "i8") t = DType::i64;
    else known = false;
    if (known && little) return t;
    if (known && big) {
      throw Error(name, "a little-endian dtype", "big-endian dtype " + quote(d) + " (byteswap it before saving)");
    }
  }
  throw Error(name, "dtype " + std::string(kSupportedDescrs), "unsupported dtype " + quote(d));
}

Header interpret_header(std::string_view text, const std::string& name) {
  const PyValue dict = LiteralParser(text, name).parse_document();
  if (dict.kind != PyValue::Kind::dict) {
    throw Error(name, "a dict as the .npy header", repr(dict));
  }
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (std::size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const PyValue& key = dict.items[i];
    const PyValue* value = &dict.items[i + 1];
    const PyValue** slot = nullptr;
    if (key.kind == PyValue::Kind::str) {
      if (key.str == "descr") slot = &descr;
      else if (key.str == "fortran_order") slot = &fortran;
      else if (key.str == "shape") slot = &shape;
    }
    if (slot == nullptr) {
      throw Error(name, "only the header keys 'descr', 'fortran_order' and 'shape'", "key " + repr(key));
    }
    if (*slot != nullptr) throw Error(name, "each header key once", "key " + repr(key) + " twice");
    *slot = value;
  }
  std::string missing;
  const std::pair<const PyValue*, const char*> required[] = {
      {descr, "'descr'"}, {fortran, "'fortran_order'"}, {shape, "'shape'"}};
  for (const auto& [value, key] : required) {
    if (value == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(key);
  }
  if (!missing.empty()) {
    throw Error(name, "header keys 'descr', 'fortran_order' and 'shape'",
                "a header missing " + missing + ": \"" + printable(text) + "\"");
  }

  Header h;
  h.dtype = parse_descr(*descr, name);

  if (fortran->kind != PyValue::Kind::boolean) {
    throw Error(name, "fortran_order True or False", "fortran_order " + repr(*fortran));
  }
  if (fortran->boolean) {
    throw Error(name, "C order (fortran_order False)",
                "fortran_order True (save a C-contiguous array, e.g. numpy.ascontiguousarray)");
  }

  if (shape->kind != PyValue::Kind::tuple) {
    throw Error(name, "a tuple of ints for 'shape'", repr(*shape));
  }
  if (shape->items.size() > static_cast<std::size_t>(kMaxNpyRank)) {
    throw Error(name, "rank <= " + std::to_string(kMaxNpyRank), "rank " + std::to_string(shape->items.size()));
  }
  for (const PyValue& dim : shape->items) {
    if (dim.kind != PyValue::Kind::integer) {
      throw Error(name, "a tuple of ints for 'shape'", repr(*shape));
    }
    h.shape.push_back(dim.integer);
  }
  for (std::int64_t dim : h.shape) {
    if (dim < 0) throw Error(name, "non-negative dimensions", "shape " + shape_repr(h.shape));
  }
  for (std::int64_t dim : h.shape) {
    if (__builtin_mul_overflow(h.numel, dim, &h.numel)) {
      throw Error(name, "an element count that fits in int64", "shape " + shape_repr(h.shape) + " (overflow)");
    }
  }
  if (__builtin_mul_overflow(h.numel, static_cast<std::int64_t>(dtype_size(h.dtype)), &h.nbytes)) {
    throw Error(name, "a byte count that fits in int64",
                "shape " + shape_repr(h.shape) + " of " + dtype_name(h.dtype) + " (overflow)");
  }
  // With a 0 extent the count is 0, yet the byte strides of the axes before
  // it (C order: products of the extents after them) must still fit.
  std::int64_t stride = static_cast<std::int64_t>(dtype_size(h.dtype));
  for (std::size_t a = h.shape.size(); a-- > 1;) {
    if (__builtin_mul_overflow(stride, h.shape[a], &stride)) {
      throw Error(name, "strides that fit in int64", "shape " + shape_repr(h.shape) + " (overflow)");
    }
  }
  return h;
}

// Magic, version and header length: the fixed-size part before the header.
struct Preamble {
  std::size_t header_begin = 0;
  std::size_t header_len = 0;
  std::size_t data_begin() const { return header_begin + header_len; }
};

// `head` holds the first min(total, 12) bytes of a file of `total` bytes.
Preamble read_preamble(std::span<const std::byte> head, std::uint64_t total, const std::string& name) {
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(head[i]); };
  const std::string_view seen(reinterpret_cast<const char*>(head.data()), std::min<std::size_t>(head.size(), 6));
  if (seen != kMagic.substr(0, seen.size())) {
    throw Error(name, "a .npy file starting with the magic \"\\x93NUMPY\"", "\"" + printable(seen) + "\"");
  }
  const auto truncated = [&](std::size_t need) {
    return Error(name, "a .npy preamble of " + std::to_string(need) + " bytes",
                 "a truncated header (the file has only " + std::to_string(total) + " bytes)");
  };
  if (total < 8) throw truncated(10);
  const int major = byte_at(6), minor = byte_at(7);
  if (minor != 0 || major < 1 || major > 3) {
    throw Error(name, "format version 1.0, 2.0 or 3.0",
                "unsupported version " + std::to_string(major) + "." + std::to_string(minor));
  }
  Preamble p;
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  p.header_begin = 8 + len_bytes;
  if (total < p.header_begin) throw truncated(p.header_begin);
  for (std::size_t i = 0; i < len_bytes; ++i) p.header_len |= static_cast<std::size_t>(byte_at(8 + i)) << (8 * i);
  if (p.header_len > total - p.header_begin) {
    throw Error(name, "a header of at most " + std::to_string(total - p.header_begin) + " bytes (the rest of the file)",
                "header length " + std::to_string(p.header_len) + ", past the end of the file");
  }
  return p;
}

void check_data_size(const Header& h, std::uint64_t available, const std::string& name) {
  const auto want = static_cast<std::uint64_t>(h.nbytes);
  if (available == want) return;
  const std::string expected = std::to_string(want) + " bytes of data for shape " + shape_repr(h.shape) + " " +
                               dtype_name(h.dtype);
  if (available < want) {
    throw Error(name, expected, std::to_string(available) + " bytes (file truncated)");
  }
  throw Error(name, expected, std::to_string(available) + " bytes (" + std::to_string(available - want) +
                                  " trailing bytes after the data)");
}

// NumPy's bool is one byte holding 0 or 1; a file holding other values is read
// with NumPy's meaning (nonzero is true) and normalised, since any other byte
// value in a C++ bool is undefined behaviour.
void normalise_bools(NpyArray& a) {
  if (a.dtype != DType::boolean) return;
  for (std::byte& b : a.data) b = b == std::byte{0} ? std::byte{0} : std::byte{1};
}

// ---------------------------------------------------------------------------
// Writing

// The whole preamble + header for an array, and its data size in bytes.
std::string make_header(DType dtype, std::span<const std::int64_t> shape, const void* data, const std::string& name,
                        std::size_t& nbytes) {
  const char* descr = nullptr;
  switch (dtype) {
    case DType::f32: descr = "<f4"; break;
    case DType::f64: descr = "<f8"; break;
    case DType::f16: descr = "<f2"; break;
    case DType::boolean: descr = "|b1"; break;
    case DType::i32: descr = "<i4"; break;
    case DType::i64: descr = "<i8"; break;
    case DType::i8: descr = "|i1"; break;
    case DType::bf16: break;
  }
  if (descr == nullptr) {
    throw Error(name, "dtype float32, float64, float16, bool, int8, int32 or int64 (.npy has no bfloat16)",
                dtype_name(dtype));
  }
  if (shape.size() > static_cast<std::size_t>(kMaxNpyRank)) {
    throw Error(name, "rank <= " + std::to_string(kMaxNpyRank), "rank " + std::to_string(shape.size()));
  }
  std::int64_t numel = 1, bytes = 0;
  for (std::int64_t dim : shape) {
    if (dim < 0) throw Error(name, "non-negative dimensions", "shape " + shape_repr(shape));
  }
  for (std::int64_t dim : shape) {
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      throw Error(name, "an element count that fits in int64", "shape " + shape_repr(shape) + " (overflow)");
    }
  }
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(dtype_size(dtype)), &bytes)) {
    throw Error(name, "a byte count that fits in int64", "shape " + shape_repr(shape) + " (overflow)");
  }
  if (data == nullptr && bytes > 0) throw Error(name, "a data pointer", "nullptr for " + std::to_string(bytes) + " bytes");
  nbytes = static_cast<std::size_t>(bytes);

  // Same text as numpy.save writes (keys sorted, Python reprs, trailing ", ").
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_repr(shape) +
                     ", }";
  // Version 1.0 whenever its 16-bit length field can hold the padded header.
  for (const int major : {1, 2}) {
    const std::size_t preamble = major == 1 ? 10 : 12;
    const std::size_t unpadded = preamble + dict.size() + 1;  // + '\n'
    const std::size_t total = (unpadded + kAlign - 1) / kAlign * kAlign;
    const std::size_t header_len = total - preamble;
    if (major == 1 && header_len > 0xffff) continue;
    std::string out(kMagic);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
    out += dict;
    out.append(total - unpadded, ' ');
    out += '\n';
    return out;
  }
  // Unreachable for rank <= 8: a 2.0 header has a 32-bit length.
  throw Error(name, "a header that fits in a .npy file", "a header of " + std::to_string(dict.size()) + " bytes");
}

// Writes all of [p, p+n), retrying on short writes and EINTR. Returns 0 or an errno.
int write_all(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; ask for no more than 1 GiB.
    const ssize_t w = ::write(fd, c, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

// Reads exactly n bytes at `offset`. Returns the number read (short only at end of file); throws on error.
std::size_t read_at(int fd, void* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  auto* c = static_cast<char*>(p);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, c + done, std::min<std::size_t>(n - done, std::size_t{1} << 30),
                              static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": cannot read: " + errno_message(errno));
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  return done;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  // Closes now and reports close()'s errno (0 on success): a failed close can
  // mean lost data on some file systems, so the writer checks it.
  int reset() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

// Creates path + ".tmp.XXXXXX" exclusively. Unlike mkstemp (mode 0600) this
// lets the umask decide the mode, as for any newly created file.
int create_temp(const std::string& path, std::string& tmp_path) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static std::atomic<std::uint64_t> counter{0};
  std::mt19937_64 rng(std::random_device{}() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull) ^
                      static_cast<std::uint64_t>(::getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp_path = path + ".tmp.";
    for (int i = 0; i < 6; ++i) tmp_path += kChars[rng() % (sizeof(kChars) - 1)];
    const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------
// NpyArray

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      throw Error(name.empty() ? "npy array" : name, "a valid shape", shape_repr(shape));
    }
  }
  return n;
}

void NpyArray::require_dtype(DType want) const {
  if (dtype != want) {
    throw Error(name.empty() ? "npy array" : name, std::string("dtype ") + dtype_name(want),
                std::string(dtype_name(dtype)));
  }
}

TensorView NpyArray::view() {
  const std::string who = name.empty() ? "npy array" : name;
  if (shape.size() > static_cast<std::size_t>(kMaxRank)) {
    throw Error(who, "rank <= " + std::to_string(kMaxRank) + " for a tensor view",
                "rank " + std::to_string(shape.size()) + " shape " + shape_repr(shape));
  }
  const std::int64_t n = numel();
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(dtype)), &bytes) ||
      static_cast<std::uint64_t>(bytes) != data.size()) {
    throw Error(who, std::to_string(n) + " elements of " + dtype_name(dtype) + " for shape " + shape_repr(shape),
                std::to_string(data.size()) + " bytes of data");
  }
  TensorView v;
  v.data = data.data();
  v.dtype = dtype;
  if (shape.empty()) {
    v.rank = 1;
    v.shape[0] = 1;
    v.stride[0] = 1;
    return v;
  }
  return TensorView::contiguous(data.data(), dtype, shape);
}

// ---------------------------------------------------------------------------
// Public functions

NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& name) {
  const Preamble p = read_preamble(bytes.first(std::min<std::size_t>(bytes.size(), 12)), bytes.size(), name);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + p.header_begin, p.header_len);
  Header h = interpret_header(text, name);
  check_data_size(h, bytes.size() - p.data_begin(), name);
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = std::move(h.shape);
  a.name = name;
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(p.data_begin()), bytes.end());
  normalise_bools(a);
  return a;
}

NpyArray read_npy(const std::string& path) {
  // Read the pieces directly (rather than the whole file then copy) so that a
  // large array is held in memory once.
  // O_NONBLOCK: opening a FIFO (or a device) for reading must not wait for a
  // writer before the file type has been checked; a regular file ignores it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw Error(path + ": cannot open for reading: " + errno_message(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(path + ": cannot stat: " + errno_message(errno));
  if (!S_ISREG(st.st_mode)) {
    throw Error(path, "a regular .npy file",
                S_ISDIR(st.st_mode)    ? "a directory"
                : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                : S_ISSOCK(st.st_mode) ? "a socket"
                : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                             : "not a regular file");
  }
  if (const int fl = ::fcntl(fd.get(), F_GETFL); fl >= 0) ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  const auto total = static_cast<std::uint64_t>(st.st_size);
  const auto short_read = [&](std::uint64_t at) {
    return Error(path, std::to_string(total) + " bytes (the size when opened)",
                 "end of file at byte " + std::to_string(at) + " (file truncated while reading)");
  };

  std::byte head[12];
  const std::size_t head_size = static_cast<std::size_t>(std::min<std::uint64_t>(total, sizeof head));
  if (read_at(fd.get(), head, head_size, 0, path) != head_size) throw short_read(0);
  const Preamble p = read_preamble(std::span<const std::byte>(head, head_size), total, path);

  std::string text(p.header_len, '\0');
  if (read_at(fd.get(), text.data(), text.size(), p.header_begin, path) != text.size()) {
    throw short_read(p.header_begin);
  }
  Header h = interpret_header(text, path);
  // Checked against the real file size before the data buffer is allocated.
  check_data_size(h, total - p.data_begin(), path);

  NpyArray a;
  a.dtype = h.dtype;
  a.shape = std::move(h.shape);
  a.name = path;
  a.data.resize(static_cast<std::size_t>(h.nbytes));
  if (read_at(fd.get(), a.data.data(), a.data.size(), p.data_begin(), path) != a.data.size()) {
    throw short_read(p.data_begin());
  }
  normalise_bools(a);
  return a;
}

std::vector<std::byte> encode_npy(DType dtype, std::span<const std::int64_t> shape, const void* data) {
  std::size_t nbytes = 0;
  const std::string header = make_header(dtype, shape, data, "encode_npy", nbytes);
  std::vector<std::byte> out(header.size() + nbytes);
  std::memcpy(out.data(), header.data(), header.size());
  if (nbytes > 0) std::memcpy(out.data() + header.size(), data, nbytes);
  return out;
}

void write_npy(const std::string& path, DType dtype, std::span<const std::int64_t> shape, const void* data) {
  // Validate everything before touching the file system.
  std::size_t nbytes = 0;
  const std::string header = make_header(dtype, shape, data, path, nbytes);
  write_file_atomic(path, header.data(), header.size(), data, nbytes);
}

void write_file_atomic(const std::string& path, const void* head, std::size_t head_bytes, const void* body,
                       std::size_t body_bytes) {
  std::string tmp;
  Fd fd(create_temp(path, tmp));
  if (fd.get() < 0) {
    throw Error(path + ": cannot write: cannot create a temporary file next to it: " + errno_message(errno));
  }
  // From here on, any failure removes the temporary file.
  bool committed = false;
  struct RemoveTemp {
    const std::string& tmp;
    const bool& committed;
    ~RemoveTemp() {
      if (!committed) ::unlink(tmp.c_str());
    }
  } remove_temp{tmp, committed};
  const auto fail = [&](const std::string& what, int err) {
    return Error(path + ": cannot write: " + what + " " + tmp + ": " + errno_message(err));
  };

  // Replacing a file keeps its permissions, as writing into it would.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::fchmod(fd.get(), st.st_mode & 07777);

  if (head_bytes > 0) {
    if (int err = write_all(fd.get(), head, head_bytes)) throw fail("write to", err);
  }
  if (body_bytes > 0) {
    if (int err = write_all(fd.get(), body, body_bytes)) throw fail("write to", err);
  }
  if (::fsync(fd.get()) != 0) throw fail("fsync", errno);
  if (int err = fd.reset()) throw fail("close", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename over it from", errno);
  committed = true;

  // Make the rename itself durable. Best effort: the data is already in place
  // and some file systems refuse fsync on a directory.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

}  // namespace sdpa::io
