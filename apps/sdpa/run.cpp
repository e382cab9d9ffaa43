// `sdpa run`: attention on .npy files, forward and (with --do) backward.
//
// Inputs are read whole, interpreted in the chosen layout and handed to the
// library as views (float32 and float16 files in [B, N, H, d] memory are not
// copied; the bshd view's strides do the transposition). --storage converts
// Q, K, V and dO once on load to the dtype the library is to read, and O and
// the gradients are written in --out-dtype, by default float16 from float16
// and float32 otherwise (float64 with --reference). Every output is computed
// before any file is touched, and the files are then staged next to their
// destinations and renamed into place together, so a failing run leaves no
// output of its own behind and existing files unchanged.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "io/npy.h"
#include "output_files.h"
#include "ring_run.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/serving.h"

namespace sdpa::cli {
namespace {

enum class Layout { bhsd, bshd };

struct RunArgs {
  std::string q, k, v, out, lse, probs;
  std::string scale;  // empty: the library's default 1/√d
  bool causal = false;
  std::string layout = "bhsd";
  std::string align = "bottom-right";
  bool reference = false;
  std::string isa = "auto";
  std::string threads = "0";
  std::string cu_seqlens_q, cu_seqlens_k;  // packed variable-length batches
  std::string window_left = "-1", window_right = "-1";
  std::string softcap;
  // Masks and score modifiers (inputs).
  std::string mask, alibi_slopes, sinks;
  // Dropout: the probability (empty: off), the stream, and the keep decisions (an output).
  std::string dropout, seed = "0", dropout_offset = "0", dropout_mask;
  // Backward: dO in, dQ, dK, dV (and dsinks) out.
  std::string d_o, dq, dk, dv, dsinks;
  // Storage: what Q, K, V and dO are converted to on load (auto: nothing, as
  // in their files), and the dtype of O and the gradients.
  std::string storage = "auto", out_dtype = "auto";
  // Ring attention over MPI (under mpirun): every rank runs a shard.
  bool ring = false, zigzag = false;
};

// Everything a failure message needs to name: the flag and the file.
struct Named {
  std::string flag, path;
  std::string who() const { return flag + " " + path; }
};

std::string join_dims(const std::vector<std::int64_t>& dims) {
  return "[" + fmt::format("{}", fmt::join(dims, ", ")) + "]";
}

const char* layout_axes(Layout layout, int rank) {
  if (rank == 2) return "[N, d]";
  if (rank == 3) return layout == Layout::bhsd ? "[H, N, d]" : "[N, H, d]";
  return layout == Layout::bhsd ? "[B, H, N, d]" : "[B, N, H, d]";
}

// A file's axes in attention's order [B, H, N, d].
std::array<std::int64_t, 4> to_bhnd(const std::vector<std::int64_t>& s, Layout layout) {
  switch (s.size()) {
    case 2: return {1, 1, s[0], s[1]};
    case 3: return layout == Layout::bhsd ? std::array{std::int64_t{1}, s[0], s[1], s[2]}
                                          : std::array{std::int64_t{1}, s[1], s[0], s[2]};
    default: return layout == Layout::bhsd ? std::array{s[0], s[1], s[2], s[3]} : std::array{s[0], s[2], s[1], s[3]};
  }
}

// The inverse of to_bhnd for an output of rank `rank`.
std::vector<std::int64_t> from_bhnd(const std::array<std::int64_t, 4>& a, Layout layout, int rank) {
  switch (rank) {
    case 2: return {a[2], a[3]};
    case 3: return layout == Layout::bhsd ? std::vector{a[1], a[2], a[3]} : std::vector{a[2], a[1], a[3]};
    default: return layout == Layout::bhsd ? std::vector{a[0], a[1], a[2], a[3]} : std::vector{a[0], a[2], a[1], a[3]};
  }
}

// [B, H, rest...] with B dropped for 3-D and B, H dropped for 2-D inputs.
std::vector<std::int64_t> rank_adjusted(std::vector<std::int64_t> bh_rest, int rank) {
  bh_rest.erase(bh_rest.begin(), bh_rest.begin() + (4 - rank));
  return bh_rest;
}

// A view of memory laid out in `layout`, presented as [B, H, N, d].
TensorView layout_view(const void* data, DType dtype, const std::array<std::int64_t, 4>& a, Layout layout) {
  if (layout == Layout::bshd) return TensorView::bshd(data, dtype, a[0], a[2], a[1], a[3]);
  return TensorView::contiguous(data, dtype, {a[0], a[1], a[2], a[3]});
}

struct Input {
  Named name;
  io::NpyArray array;
  std::vector<std::byte> converted;  // the file's values in another dtype (--storage, float64 on the fast path)
  std::array<std::int64_t, 4> dims{};
  bool in_layout = false;  // read through --layout (dims is then its [B, H, N, d])
  TensorView view;
};

io::NpyArray read_input(const std::string& flag, const std::string& path) {
  try {
    return io::read_npy(path);
  } catch (const std::exception& e) {
    // read_npy's messages start with the path; put the flag in front of it.
    const std::string what = e.what();
    throw std::runtime_error(what.starts_with(path + ":") ? flag + " " + what
                                                          : fmt::format("{} {}: {}", flag, path, what));
  }
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

// The file's data as `dtype`, in in.converted (sdpa::convert: round to nearest even).
const void* convert_input(Input& in, DType dtype) {
  const std::int64_t n = in.array.numel();
  in.converted.resize(static_cast<std::size_t>(n) * dtype_size(dtype));
  if (n > 0)
    sdpa::convert(TensorView::contiguous(in.array.data.data(), in.array.dtype, {n}),
                  TensorView::contiguous(in.converted.data(), dtype, {n}));
  return in.converted.data();
}

// The data and dtype the library reads for Q, K, V or dO: the file's, or
// --storage's; a float64 file becomes float32 on the fast path. Other
// dtypes are handed over as they are, for the library to name.
std::pair<const void*, DType> stored_input(Input& in, std::optional<DType> storage, bool reference) {
  const DType file = in.array.dtype;
  // The library reads int8 K/V only with their scales, which no flag here supplies.
  if (file == DType::i8)
    throw UsageError(fmt::format("{}: expected float16, float32 or float64 (sdpa run takes no int8 scales), got "
                                 "int8 {}",
                                 in.name.who(), join_dims(in.array.shape)));
  DType want = file;
  if (is_float(file)) {
    if (storage) {
      want = *storage;
    } else if (file == DType::f64 && !reference) {
      want = DType::f32;
    }
  }
  if (want == file) return {in.array.data.data(), file};
  return {convert_input(in, want), want};
}

// Q, K, V or dO: an array in --layout.
Input load_input(const std::string& flag, const std::string& path, Layout layout, std::optional<DType> storage,
                 bool reference) {
  Input in;
  in.name = {flag, path};
  in.array = read_input(flag, path);
  // The file's rank picks its axes (the layout is the command line's); its
  // dtype and sizes are the library's to check.
  const io::NpyArray& a = in.array;
  const int rank = static_cast<int>(a.shape.size());
  if (rank < 2 || rank > 4) {
    throw UsageError(fmt::format("{}: expected rank 2, 3 or 4 ({}, {} or {} for layout {}), got rank {} {}",
                                 in.name.who(), layout_axes(layout, 2), layout_axes(layout, 3),
                                 layout_axes(layout, 4), layout == Layout::bhsd ? "bhsd" : "bshd", rank,
                                 join_dims(a.shape)));
  }
  in.dims = to_bhnd(a.shape, layout);
  in.in_layout = true;
  const auto [data, dtype] = stored_input(in, storage, reference);
  in.view = layout_view(data, dtype, in.dims, layout);
  return in;
}

// A packed array [total, heads, d] (Q, K, V, dO with --cu-seqlens-q/k).
Input load_packed(const std::string& flag, const std::string& path, std::optional<DType> storage, bool reference) {
  Input x;
  x.name = {flag, path};
  x.array = read_input(flag, path);
  const io::NpyArray& a = x.array;
  // Packed arrays are 3-D (the rank is the form; dtype and sizes are the library's).
  if (a.shape.size() != 3)
    throw UsageError(fmt::format("{}: expected a 3-D array [total, heads, d] with --cu-seqlens-q/k, got {} {}",
                                 x.name.who(), dtype_name(a.dtype), join_dims(a.shape)));
  const auto [data, dtype] = stored_input(x, storage, reference);
  x.view = TensorView::contiguous(data, dtype, {a.shape[0], a.shape[1], a.shape[2]});
  return x;
}

// An array in its own axes, whatever the layout: the mask ([B, H, Nq, Nkv] or
// broadcastable to it), ALiBi slopes, sinks, the prefix sums. `to_f32`: a
// float64 file is handed over as float32. `expected` says what it should be,
// for a rank the library cannot take.
Input load_plain(const std::string& flag, const std::string& path, bool to_f32, const char* expected) {
  Input in;
  in.name = {flag, path};
  in.array = read_input(flag, path);
  const io::NpyArray& a = in.array;
  if (a.shape.size() > static_cast<std::size_t>(kMaxRank))
    throw UsageError(fmt::format("{}: expected {}, got rank {} {}", in.name.who(), expected, a.shape.size(),
                                 join_dims(a.shape)));
  const void* data = a.data.data();
  DType dtype = a.dtype;
  if (to_f32 && a.dtype == DType::f64) {
    data = convert_input(in, DType::f32);
    dtype = DType::f32;
  }
  // A 0-d file (one number) is a view of shape [1], which broadcasts as it does in NumPy.
  const std::vector<std::int64_t> shape = a.shape.empty() ? std::vector<std::int64_t>{1} : a.shape;
  in.view = TensorView::contiguous(data, dtype, std::span<const std::int64_t>(shape));
  return in;
}

// One output array, computed in memory before anything is written.
struct Output {
  Named name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> file_shape;
  std::vector<std::byte> bytes;
  bool write = true;  // false: working memory (the lse the backward needs when --lse is not asked)
};

Output make_output(Named name, DType dtype, std::vector<std::int64_t> file_shape) {
  Output o{std::move(name), dtype, std::move(file_shape), {}};
  // The sizes come from the inputs' files: checked (overflow-free) against
  // the memory there is before the buffer is made.
  std::uint64_t bytes = dtype_size(dtype);
  for (std::int64_t d : o.file_shape) bytes = mul_sat(bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0)));
  const std::uint64_t have = physical_memory_bytes();
  if (bytes > have || bytes > static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()))
    throw CliError(kExitFailure, fmt::format("{}: expected an output that fits in memory ({} on this machine), got {} "
                                             "({})",
                                             o.name.who(), format_bytes(have), join_dims(o.file_shape),
                                             format_bytes(bytes)));
  try {
    o.bytes.resize(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    throw CliError(kExitFailure, fmt::format("{}: expected an output that fits in memory, got {} ({}: out of memory)",
                                             o.name.who(), join_dims(o.file_shape), format_bytes(bytes)));
  }
  return o;
}

// The outputs of one run, in the order they are listed; data pointers stay
// valid as more are added (each owns its buffer).
class Outputs {
 public:
  void* add(Named name, DType dtype, std::vector<std::int64_t> file_shape, bool write = true) {
    list_.push_back(make_output(std::move(name), dtype, std::move(file_shape)));
    list_.back().write = write;
    return list_.back().bytes.data();
  }
  const std::deque<Output>& list() const { return list_; }

  // All or nothing: staged next to their destinations, then renamed into place.
  void commit() const {
    StagedOutputs files("run");
    for (const Output& out : list_)
      if (out.write) files.stage(out.name.flag, out.name.path, out.dtype, out.file_shape, out.bytes.data());
    files.commit();
  }

 private:
  std::deque<Output> list_;  // a deque: adding never moves the others
};

// A library error in the command line's words, with the file its flag named
// and, for an input read through --layout, how the file was read.
CliError named_error(const Error& e, const std::vector<const Input*>& inputs, const Outputs& outputs) {
  const std::string flag = route_of(e.arg()).flag;
  for (const Input* in : inputs) {
    if (in->name.flag != flag) continue;
    if (!in->in_layout) return cli_error(e, in->name.path);
    return cli_error(e, in->name.path,
                     fmt::format(" (file shape {}, read as [B, H, N, d] = {})", join_dims(in->array.shape),
                                 join_dims({in->dims.begin(), in->dims.end()})));
  }
  for (const Output& out : outputs.list())
    if (out.name.flag == flag && out.write) return cli_error(e, out.name.path);
  return cli_error(e);
}

// The library refuses a larger [B, H, Nq, Nkv] output too, but only after the
// caller has allocated it: refused here first, in the library's words.
void check_matrix_output(const char* arg, const std::string& path, std::int64_t b, std::int64_t h, std::int64_t n_q,
                         std::int64_t n_kv) {
  if (path.empty()) return;
  std::int64_t count = 1;
  bool overflow = false;
  for (std::int64_t x : {b, h, n_q, n_kv}) overflow |= x < 0 || __builtin_mul_overflow(count, x, &count);
  if (overflow || count > kMaxProbsElements) {
    throw cli_error(Error(arg, fmt::format("at most {} elements (B*H*Nq*Nkv)", kMaxProbsElements),
                          fmt::format("{}*{}*{}*{}{}", b, h, n_q, n_kv, overflow ? "" : fmt::format(" = {}", count))),
                    path);
  }
}

// An unsigned 64-bit integer (a seed, an offset); the range beyond is the library's.
std::uint64_t parse_u64(std::string_view flag, const std::string& text) {
  std::uint64_t value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range)
    throw UsageError(fmt::format("{}: expected an integer in [0, 2^64), got '{}' (out of range)", flag, text));
  if (ec != std::errc() || ptr != end || begin == end)
    throw UsageError(fmt::format("{}: expected an integer in [0, 2^64), got '{}'", flag, text));
  return value;
}

struct Settings {
  Layout layout = Layout::bhsd;
  Align align = Align::bottom_right;
  std::optional<double> scale;
  std::int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  double dropout_p = 0;
  std::uint64_t seed = 0, dropout_offset = 0;
  Isa isa = Isa::automatic;
  int threads = 0;
  bool backward = false;
  std::optional<DType> storage;    // unset: Q, K, V, dO as in their files
  std::optional<DType> out_dtype;  // unset: auto (see output_dtype)
};

// --storage: the dtype Q, K, V and dO are converted to on load (unset: auto).
std::optional<DType> parse_storage(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (text == "f32") return DType::f32;
  if (text == "f16") return DType::f16;
  if (text == "bf16") return DType::bf16;
  throw UsageError(fmt::format("--storage: expected auto, f32, f16 or bf16, got '{}'", text));
}

// --out-dtype: the dtype O and the gradients are written in (unset: auto).
std::optional<DType> parse_out_dtype(const std::string& text, bool reference) {
  if (text == "auto") return std::nullopt;
  if (text == "f32") return DType::f32;
  if (text == "f16") return DType::f16;
  if (text == "f64" && reference) return DType::f64;
  if (text == "f64")
    throw UsageError("--out-dtype: expected auto, f32 or f16 on the fast path (f64 with --reference), got 'f64'");
  if (text == "bf16")
    throw UsageError("--out-dtype: expected auto, f32, f16 or f64 (with --reference), got 'bf16' (.npy has no "
                     "bfloat16; --storage bf16 computes from bfloat16 and writes float32)");
  throw UsageError(fmt::format("--out-dtype: expected auto, f32, f16 or f64 (with --reference), got '{}'", text));
}

// The dtype of O (or of a gradient) whose input the library reads as
// `stored`: --out-dtype, else float16 from float16 and float32 otherwise
// (float64 with --reference); bfloat16, which .npy cannot hold, gives float32.
DType output_dtype(const Settings& s, DType stored, bool reference) {
  if (s.out_dtype) return *s.out_dtype;
  if (reference) return DType::f64;
  return stored == DType::f16 ? DType::f16 : DType::f32;
}

// The backward's flags come together: dO in, dQ, dK and dV out.
void check_backward_flags(const RunArgs& args) {
  const std::pair<const char*, const std::string*> group[] = {
      {"--do", &args.d_o}, {"--dq", &args.dq}, {"--dk", &args.dk}, {"--dv", &args.dv}};
  std::vector<std::string> given, missing;
  for (const auto& [flag, path] : group) (path->empty() ? missing : given).emplace_back(flag);
  if (given.empty() && !args.dsinks.empty())
    throw UsageError("--dsinks: expected it with the backward's --do, --dq, --dk and --dv, got none of them");
  if (!given.empty() && !missing.empty())
    throw UsageError(fmt::format("{}: expected --do, --dq, --dk and --dv together (the backward), missing {}",
                                 fmt::join(given, ", "), fmt::join(missing, ", ")));
  if (!args.dsinks.empty() && args.sinks.empty())
    throw UsageError("--dsinks: expected --sinks S.npy with it (dsinks is the gradient of the sinks), got no --sinks");
}

// Flag syntax and combinations, checked before any file is read (usage
// errors). The values' ranges are the library's to check.
Settings check_flags(const RunArgs& args) {
  Settings s;
  if (args.layout == "bhsd") {
    s.layout = Layout::bhsd;
  } else if (args.layout == "bshd") {
    s.layout = Layout::bshd;
  } else {
    throw UsageError(fmt::format("--layout: expected bhsd or bshd, got '{}'", args.layout));
  }
  if (args.align == "bottom-right") {
    s.align = Align::bottom_right;
  } else if (args.align == "top-left") {
    s.align = Align::top_left;
  } else {
    throw UsageError(fmt::format("--align: expected bottom-right or top-left, got '{}'", args.align));
  }
  if (!args.scale.empty()) s.scale = parse_finite_double("--scale", args.scale);
  s.isa = parse_isa(args.isa);
  s.threads = parse_int("--threads", args.threads);
  s.window_left = parse_integer("--window-left", args.window_left);
  s.window_right = parse_integer("--window-right", args.window_right);
  if (!args.softcap.empty()) s.softcap = parse_finite_double("--softcap", args.softcap);
  if (!args.dropout.empty()) s.dropout_p = parse_finite_double("--dropout", args.dropout);
  // Read (and their syntax checked) with or without --dropout; used only with it.
  s.seed = parse_u64("--seed", args.seed);
  s.dropout_offset = parse_u64("--dropout-offset", args.dropout_offset);
  check_backward_flags(args);
  s.backward = !args.d_o.empty();
  s.storage = parse_storage(args.storage);
  s.out_dtype = parse_out_dtype(args.out_dtype, args.reference);

  if (args.cu_seqlens_q.empty() != args.cu_seqlens_k.empty())
    throw UsageError("--cu-seqlens-q and --cu-seqlens-k: expected both (a packed batch) or neither");
  if (!args.cu_seqlens_q.empty()) {
    // The [B, H, Nq, Nkv] arrays have no packed form.
    for (const auto& [flag, path] : {std::pair{"--probs", &args.probs}, std::pair{"--dropout-mask", &args.dropout_mask},
                                     std::pair{"--mask", &args.mask}})
      if (!path->empty())
        throw UsageError(fmt::format("{}: not available with packed sequences (--cu-seqlens-q/k)", flag));
  }

  if (args.zigzag && !args.ring) throw UsageError("--zigzag: expected it with --ring (it is ring attention's sharding)");
  if (args.ring) {
    if (args.reference) throw UsageError("--reference: not available with --ring (the ring runs the fast path)");
    for (const auto& [flag, path] : {std::pair{"--probs", &args.probs}, std::pair{"--dropout-mask", &args.dropout_mask},
                                     std::pair{"--mask", &args.mask}, std::pair{"--cu-seqlens-q", &args.cu_seqlens_q},
                                     std::pair{"--dropout", &args.dropout}})
      if (!path->empty()) throw UsageError(fmt::format("{}: not available with --ring", flag));
    if (s.storage && *s.storage != DType::f32)
      throw UsageError("--storage: expected auto or f32 with --ring (the ring computes in float32), got " +
                       args.storage);
  }

  check_distinct({{"--out", args.out},
                  {"--lse", args.lse},
                  {"--probs", args.probs},
                  {"--dropout-mask", args.dropout_mask},
                  {"--dq", args.dq},
                  {"--dk", args.dk},
                  {"--dv", args.dv},
                  {"--dsinks", args.dsinks}},
                 {{"--q", args.q},
                  {"--k", args.k},
                  {"--v", args.v},
                  {"--do", args.d_o},
                  {"--mask", args.mask},
                  {"--alibi-slopes", args.alibi_slopes},
                  {"--sinks", args.sinks},
                  {"--cu-seqlens-q", args.cu_seqlens_q},
                  {"--cu-seqlens-k", args.cu_seqlens_k}});
  for (const auto& [flag, path] : {std::pair{"--out", &args.out}, std::pair{"--lse", &args.lse},
                                   std::pair{"--probs", &args.probs}, std::pair{"--dropout-mask", &args.dropout_mask},
                                   std::pair{"--dq", &args.dq}, std::pair{"--dk", &args.dk},
                                   std::pair{"--dv", &args.dv}, std::pair{"--dsinks", &args.dsinks}})
    if (!path->empty()) check_destination(flag, *path);
  return s;
}

// The inputs every form of the call may take besides Q, K, V.
struct Modifiers {
  std::optional<Input> mask, alibi_slopes, sinks;
};

Modifiers load_modifiers(const RunArgs& args) {
  Modifiers m;
  // The mask keeps a float64 file's precision on the oracle; the fast path takes float32.
  if (!args.mask.empty())
    m.mask = load_plain("--mask", args.mask, !args.reference, "a mask of rank 1 to 4 broadcastable to [B, H, Nq, Nkv]");
  // Slopes and sinks are float32 for both paths.
  if (!args.alibi_slopes.empty())
    m.alibi_slopes = load_plain("--alibi-slopes", args.alibi_slopes, true, "shape [H] or [B, H]");
  if (!args.sinks.empty()) m.sinks = load_plain("--sinks", args.sinks, true, "shape [H]");
  return m;
}

Options base_options(const RunArgs& args, const Settings& s, const Modifiers& m) {
  Options opt;
  opt.scale = s.scale;
  opt.causal = args.causal;
  opt.align = s.align;
  opt.isa = s.isa;
  opt.threads = s.threads;
  opt.window_left = s.window_left;
  opt.window_right = s.window_right;
  opt.softcap = s.softcap;
  if (m.mask) opt.mask = m.mask->view;
  if (m.alibi_slopes) opt.alibi_slopes = m.alibi_slopes->view;
  if (m.sinks) opt.sinks = m.sinks->view;
  opt.dropout_p = s.dropout_p;
  opt.dropout_seed = s.seed;
  opt.dropout_offset = s.dropout_offset;
  return opt;
}

// The backward's Options: the forward's, without its optional outputs.
Options backward_options(Options opt) {
  opt.lse = {};
  opt.probs = {};
  opt.scores = {};
  opt.dropout_mask = {};
  return opt;
}

std::vector<const Input*> input_list(std::initializer_list<const Input*> main, const Modifiers& m,
                                     const std::optional<Input>& d_o) {
  std::vector<const Input*> list(main);
  for (const std::optional<Input>* x : {&d_o, &m.mask, &m.alibi_slopes, &m.sinks})
    if (*x) list.push_back(&**x);
  return list;
}

// What the run did besides plain attention, for the summary line.
std::string features(const RunArgs& args, const Settings& s) {
  std::string f;
  if (args.causal) f += ", causal";
  if (args.align != "bottom-right") f += ", aligned top-left";
  if (s.window_left >= 0 || s.window_right >= 0) f += fmt::format(", window [{}, {}]", s.window_left, s.window_right);
  if (s.softcap > 0) f += ", softcap " + format_number(s.softcap);
  if (!args.mask.empty()) f += ", mask";
  if (!args.alibi_slopes.empty()) f += ", ALiBi";
  if (!args.sinks.empty()) f += ", sinks";
  if (s.dropout_p > 0)
    f += fmt::format(", dropout {} (seed {}, offset {})", format_number(s.dropout_p), s.seed, s.dropout_offset);
  if (s.backward) f += ", forward and backward";
  return f;
}

void print_summary(const std::string& head, const std::vector<const Input*>& inputs, const Outputs& outputs) {
  fmt::print("{}\n\n", head);
  Table t({{"array", Justify::left},
           {"file", Justify::left},
           {"dtype", Justify::left},
           {"shape", Justify::left},
           {"as [B, H, N, d]", Justify::left}});
  for (const Input* in : inputs) {
    const std::string dtype = in->view.dtype == in->array.dtype
                                  ? dtype_name(in->array.dtype)
                                  : fmt::format("{} as {}", dtype_name(in->array.dtype), dtype_name(in->view.dtype));
    t.add_row({in->name.flag, in->name.path, dtype, join_dims(in->array.shape),
               in->in_layout ? join_dims({in->dims.begin(), in->dims.end()}) : ""});
  }
  for (const Output& out : outputs.list())
    if (out.write) t.add_row({out.name.flag, out.name.path, dtype_name(out.dtype), join_dims(out.file_shape), ""});
  fmt::print("{}", t.render());
}

// Packed variable-length batch: Q [total_q, H, d], K/V [total_k, Hkv, d|dv],
// O [total_q, H, dv], lse [H, total_q]; sequence s is rows cu[s] .. cu[s+1].
// The gradients have the shapes of Q, K, V.
int run_packed(const RunArgs& args, const Settings& s) {
  Input cu_q = load_plain("--cu-seqlens-q", args.cu_seqlens_q, false, "prefix sums [n + 1]");
  Input cu_k = load_plain("--cu-seqlens-k", args.cu_seqlens_k, false, "prefix sums [n + 1]");
  const Input q = load_packed("--q", args.q, s.storage, args.reference);
  const Input k = load_packed("--k", args.k, s.storage, args.reference);
  const Input v = load_packed("--v", args.v, s.storage, args.reference);
  std::optional<Input> d_o;
  if (s.backward) d_o = load_packed("--do", args.d_o, s.storage, args.reference);
  const Modifiers m = load_modifiers(args);
  std::vector<const Input*> inputs = input_list({&q, &k, &v}, m, d_o);
  inputs.push_back(&cu_q);
  inputs.push_back(&cu_k);

  const std::int64_t tq = q.array.shape[0], h = q.array.shape[1], dv = v.array.shape[2];
  // lse (and dsinks) are float32 (float64 with --reference); O and the gradients see output_dtype.
  const DType stat_dtype = args.reference ? DType::f64 : DType::f32;
  const DType o_dtype = output_dtype(s, q.view.dtype, args.reference);
  Outputs outputs;
  Options opt = base_options(args, s, m);
  void* o = outputs.add({"--out", args.out}, o_dtype, {tq, h, dv});
  void* lse = nullptr;
  if (!args.lse.empty() || s.backward)
    lse = outputs.add(args.lse.empty() ? Named{"--lse", "(for the backward)"} : Named{"--lse", args.lse}, stat_dtype,
                      {h, tq}, !args.lse.empty());
  if (lse) opt.lse = TensorView::contiguous(lse, stat_dtype, {h, tq});
  const TensorView o_view = TensorView::contiguous(o, o_dtype, {tq, h, dv});
  try {
    attention_varlen(q.view, k.view, v.view, o_view, cu_q.view, cu_k.view, opt, -1, -1, args.reference);
  } catch (const Error& e) {
    throw named_error(e, inputs, outputs);
  }
  if (s.backward) {
    Gradients g;
    const auto gradient = [&](const char* flag, const std::string& path, const Input& of) {
      const DType t = output_dtype(s, of.view.dtype, args.reference);
      return TensorView::contiguous(outputs.add({flag, path}, t, of.array.shape), t,
                                    std::span<const std::int64_t>(of.array.shape));
    };
    g.dq = gradient("--dq", args.dq, q);
    g.dk = gradient("--dk", args.dk, k);
    g.dv = gradient("--dv", args.dv, v);
    if (!args.dsinks.empty())
      g.dsinks = TensorView::contiguous(outputs.add({"--dsinks", args.dsinks}, stat_dtype, {h}), stat_dtype, {h});
    try {
      attention_varlen_backward(q.view, k.view, v.view, o_view, opt.lse, d_o->view, g, cu_q.view, cu_k.view,
                                backward_options(opt), -1, -1, args.reference);
    } catch (const Error& e) {
      throw named_error(e, inputs, outputs);
    }
  }
  outputs.commit();
  std::string wrote;
  for (const Output& out : outputs.list())
    if (out.write) wrote += (wrote.empty() ? "" : ", ") + out.name.path;
  fmt::print("sdpa run: packed batch of {} sequences ({} query rows), {} path{}; wrote {}\n", cu_q.array.numel() - 1,
             tq, args.reference ? "reference" : "fast", features(args, s), wrote);
  return kExitOk;
}

// The forward, then (with --do) the backward, in this process.
template <class MakeGradients>
void run_single(const RunArgs& args, const Settings& s, const Input& q, const Input& k, const Input& v,
                const std::optional<Input>& d_o, const std::vector<const Input*>& inputs, Outputs& outputs,
                const Options& opt, const TensorView& o_view, const MakeGradients& gradients) {
  try {
    if (args.reference) {
      reference_attention(q.view, k.view, v.view, o_view, opt);
    } else {
      attention(q.view, k.view, v.view, o_view, opt);
    }
  } catch (const Error& e) {
    throw named_error(e, inputs, outputs);
  }

  if (s.backward) {
    const Gradients g = gradients();
    const Options bopt = backward_options(opt);
    try {
      if (args.reference) {
        reference_attention_backward(q.view, k.view, v.view, o_view, opt.lse, d_o->view, g, bopt);
      } else {
        attention_backward(q.view, k.view, v.view, o_view, opt.lse, d_o->view, g, bopt);
      }
    } catch (const Error& e) {
      throw named_error(e, inputs, outputs);
    }
  }
}

// Dense [B, H, N, d] inputs, in one process or (ring != nullptr) on rank 0 of the ring.
int run_dense(const RunArgs& args, const Settings& s, RingSession* ring) {

  const Input q = load_input("--q", args.q, s.layout, s.storage, args.reference);
  const Input k = load_input("--k", args.k, s.layout, s.storage, args.reference);
  const Input v = load_input("--v", args.v, s.layout, s.storage, args.reference);
  std::optional<Input> d_o;
  if (s.backward) d_o = load_input("--do", args.d_o, s.layout, s.storage, args.reference);
  const int rank = static_cast<int>(q.array.shape.size());
  const Input* d_o_in = d_o ? &*d_o : nullptr;
  for (const Input* in : {&k, &v, d_o_in}) {
    if (in && in->array.shape.size() != q.array.shape.size()) {
      throw UsageError(fmt::format("{}: expected rank {} like --q {} ({} for layout {}), got rank {} {}",
                                   in->name.who(), rank, q.name.path, layout_axes(s.layout, rank), args.layout,
                                   in->array.shape.size(), join_dims(in->array.shape)));
    }
  }
  const Modifiers m = load_modifiers(args);
  const std::vector<const Input*> inputs = input_list({&q, &k, &v}, m, d_o);

  const std::int64_t b = q.dims[0], h = q.dims[1], n_q = q.dims[2], n_kv = k.dims[2], dv = v.dims[3];
  check_matrix_output("probs", args.probs, b, h, n_q, n_kv);
  check_matrix_output("dropout_mask", args.dropout_mask, b, h, n_q, n_kv);

  // lse, probs (and dsinks) are float32 (float64 with --reference); O and the gradients see output_dtype.
  const DType stat_dtype = args.reference ? DType::f64 : DType::f32;
  const DType o_dtype = output_dtype(s, q.view.dtype, args.reference);
  Outputs outputs;
  Options opt = base_options(args, s, m);
  void* o = outputs.add({"--out", args.out}, o_dtype, from_bhnd({b, h, n_q, dv}, s.layout, rank));
  if (!args.lse.empty() || s.backward) {
    const Named name = args.lse.empty() ? Named{"--lse", "(for the backward)"} : Named{"--lse", args.lse};
    opt.lse = TensorView::contiguous(outputs.add(name, stat_dtype, rank_adjusted({b, h, n_q}, rank), !args.lse.empty()),
                                     stat_dtype, {b, h, n_q});
  }
  if (!args.probs.empty()) {
    opt.probs = TensorView::contiguous(
        outputs.add({"--probs", args.probs}, stat_dtype, rank_adjusted({b, h, n_q, n_kv}, rank)), stat_dtype,
        {b, h, n_q, n_kv});
  }
  if (!args.dropout_mask.empty()) {
    opt.dropout_mask = TensorView::contiguous(
        outputs.add({"--dropout-mask", args.dropout_mask}, DType::boolean, rank_adjusted({b, h, n_q, n_kv}, rank)),
        DType::boolean, {b, h, n_q, n_kv});
  }
  const TensorView o_view = layout_view(o, o_dtype, {b, h, n_q, dv}, s.layout);
  // The gradients in the layout and rank of their inputs.
  const auto gradients = [&] {
    Gradients g;
    const auto gradient = [&](const char* flag, const std::string& path, const Input& of) {
      const DType t = output_dtype(s, of.view.dtype, args.reference);
      return layout_view(outputs.add({flag, path}, t, of.array.shape), t, of.dims, s.layout);
    };
    g.dq = gradient("--dq", args.dq, q);
    g.dk = gradient("--dk", args.dk, k);
    g.dv = gradient("--dv", args.dv, v);
    if (!args.dsinks.empty())
      g.dsinks = TensorView::contiguous(outputs.add({"--dsinks", args.dsinks}, stat_dtype, {h}), stat_dtype, {h});
    return g;
  };
  if (ring) {
    RingProblem rp{.q = q.view, .k = k.view, .v = v.view, .d_o = {}, .o = o_view, .lse = opt.lse, .grads = {},
                   .opt = opt};
    if (s.backward) {
      rp.d_o = d_o->view;
      rp.grads = gradients();
    }
    try {
      ring->run_root(rp, args.zigzag);
    } catch (const Error& e) {
      throw named_error(e, inputs, outputs);
    }
  } else {
    run_single(args, s, q, k, v, d_o, inputs, outputs, opt, o_view, gradients);
  }

  outputs.commit();

  // A summary of what was read and written.
  const double scale = s.scale ? *s.scale : 1.0 / std::sqrt(static_cast<double>(q.dims[3]));
  const int threads = s.threads > 0 ? s.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  print_summary(fmt::format("sdpa run: {}, layout {}, scale {}{}{}",
                            args.reference ? "reference path (float64 oracle)"
                                           : fmt::format("fast path ({}, {} threads)", isa_name(resolve_isa(s.isa)),
                                                         threads),
                            args.layout, format_number(scale), s.scale ? "" : fmt::format(" (1/√{})", q.dims[3]),
                            features(args, s) + (ring ? "; " + ring->summary() : "")),
                inputs, outputs);
  return kExitOk;
}

int run_run(const RunArgs& args) {
  const Settings s = check_flags(args);
  if (!args.cu_seqlens_q.empty()) return run_packed(args, s);
  if (!args.ring) return run_dense(args, s, nullptr);
  // Destroyed at exit, after main has written rank 0's error (if any): the
  // ranks leave together (see ~RingSession).
  static RingSession session;
  if (session.rank() != 0) return session.run_worker(base_options(args, s, Modifiers{}), args.zigzag);
  try {
    return run_dense(args, s, &session);
  } catch (const CliError& e) {
    session.abandon(e.exit_code());
    throw;
  } catch (const std::exception&) {
    session.abandon(kExitFailure);
    throw;
  }
}

const Registrar kRegistrar{Command{
    "run",
    "Compute attention on .npy files, forward and backward (float16, float32 or float64, C order)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<RunArgs>();
      const auto path_option = [&](const char* flag, std::string& target, const std::string& help) {
        return sub.add_option(flag, target, help)->type_name("PATH")->check(file_name());
      };
      path_option("--q", args->q, "Queries Q.npy: [B, H, Nq, d] (see --layout; 3-D drops B, 2-D drops B and H)")
          ->required();
      path_option("--k", args->k, "Keys K.npy: [B, Hkv, Nkv, d], Hkv dividing H")->required();
      path_option("--v", args->v, "Values V.npy: [B, Hkv, Nkv, dv]")->required();
      path_option("--out", args->out, "Output O.npy: [B, H, Nq, dv] in the layout and rank of Q")->required();
      path_option("--lse", args->lse, "Also write the log-sum-exp per query: [B, H, Nq] (rank-adjusted)");
      path_option("--probs", args->probs,
                  fmt::format("Also write the probabilities: [B, H, Nq, Nkv] (rank-adjusted, at most {} elements)",
                              kMaxProbsElements));
      sub.add_option("--scale", args->scale, "Score scale, a finite number > 0 (default 1/√d)")->type_name("S");
      sub.add_flag("--causal", args->causal, "Causal mask: key j visible to the query at position p iff j <= p");
      sub.add_option("--align", args->align,
                     "Where query i sits for --causal, the window and ALiBi: p = i + Nkv - Nq (bottom-right, "
                     "FlashAttention's) or p = i (top-left, PyTorch's is_causal)")
          ->type_name("bottom-right|top-left")
          ->capture_default_str();
      sub.add_option("--layout", args->layout,
                     "Memory layout of Q, K, V, O, dO and the gradients: bhsd = [B, H, N, d], bshd = [B, N, H, d]")
          ->type_name("bhsd|bshd")
          ->capture_default_str();
      sub.add_option("--window-left", args->window_left,
                     "Sliding window: a query at position p sees keys j >= p - LEFT (-1 = unbounded)")
          ->type_name("LEFT")
          ->capture_default_str();
      sub.add_option("--window-right", args->window_right, "Sliding window: keys j <= p + RIGHT (-1 = unbounded)")
          ->type_name("RIGHT")
          ->capture_default_str();
      sub.add_option("--softcap", args->softcap, "Softcap c > 0: s <- c·tanh(s/c) on the scaled scores (0 = off)")
          ->type_name("C");
      path_option("--mask", args->mask,
                  "Mask M.npy: bool (true = may attend) or float32/float16 (added to the scores, -inf disables a "
                  "key), any shape broadcastable to [B, H, Nq, Nkv] by NumPy rules; always in those axes, whatever "
                  "--layout");
      path_option("--alibi-slopes", args->alibi_slopes,
                  "ALiBi slopes A.npy: float32 [H] or [B, H]; adds -slope·|p - j| to the score of key j");
      path_option("--sinks", args->sinks,
                  "Attention sinks S.npy: float32 [H], a per-head logit that joins the softmax's denominator");
      sub.add_option("--dropout", args->dropout,
                     "Dropout probability P in [0, 1) on the attention probabilities (kept ones scaled by "
                     "1/(1-P)); off when not given")
          ->type_name("P");
      sub.add_option("--seed", args->seed, "Dropout seed, 0 .. 2^64-1 (without --dropout: read, not used)")
          ->type_name("N")
          ->capture_default_str();
      sub.add_option("--dropout-offset", args->dropout_offset,
                     "Dropout stream offset below 2^32 (advance it per training step; without --dropout: not used)")
          ->type_name("N")
          ->capture_default_str();
      path_option("--dropout-mask", args->dropout_mask,
                  fmt::format("Also write dropout's keep decisions: bool [B, H, Nq, Nkv] (rank-adjusted, at most {} "
                              "elements; all true without --dropout)",
                              kMaxProbsElements));
      path_option("--do", args->d_o,
                  "Backward: the gradient dO.npy of the loss with respect to O, [B, H, Nq, dv] like O; needs --dq, "
                  "--dk and --dv");
      path_option("--dq", args->dq, "Backward: write dQ.npy in the layout and shape of Q");
      path_option("--dk", args->dk, "Backward: write dK.npy in the layout and shape of K");
      path_option("--dv", args->dv, "Backward: write dV.npy in the layout and shape of V");
      path_option("--dsinks", args->dsinks, "Backward: also write dsinks.npy [H], the gradient of --sinks");
      path_option("--cu-seqlens-q", args->cu_seqlens_q,
                  "Packed batch: int32/int64 prefix sums [n + 1] of query rows; Q, O, dO are then [total_q, H, d]");
      path_option("--cu-seqlens-k", args->cu_seqlens_k,
                  "Packed batch: prefix sums [n + 1] of key rows; K, V are then [total_k, Hkv, d]");
      sub.add_flag("--reference", args->reference,
                   "Use the float64 oracle, forward and backward (float64 inputs stay float64; writes float64 "
                   "unless --out-dtype says otherwise)");
      sub.add_option("--storage", args->storage,
                     "Convert Q, K, V and dO on load to this dtype and compute from it (round to nearest even; "
                     "bf16 is how bfloat16, which .npy cannot hold, is reached); auto = as in their files")
          ->type_name("auto|f32|f16|bf16")
          ->capture_default_str();
      sub.add_option("--out-dtype", args->out_dtype,
                     "Dtype of O, dQ, dK and dV: auto = float16 where the input (Q for O) is read as float16, "
                     "else float32 (float64 with --reference); f64 only with --reference; .npy has no bfloat16")
          ->type_name("auto|f32|f16|f64")
          ->capture_default_str();
      sub.add_flag("--ring", args->ring,
                   "Ring attention over MPI: run under mpirun -np P; every rank computes a shard of the sequence "
                   "(rank 0 reads the files, scatters the shards, gathers the results and writes them); the same "
                   "flags and files as without it, except --reference, --mask, --probs, --dropout, --dropout-mask "
                   "and packed batches");
      sub.add_flag("--zigzag", args->zigzag,
                   "With --ring: zigzag sharding, the sequence cut into 2P chunks and rank r holding chunks r and "
                   "2P-1-r, so that with --causal every rank does the same work (default: rank r holds rows "
                   "[r·N/P, (r+1)·N/P))");
      sub.add_option("--isa", args->isa, "Kernel instruction set: " + isa_choices())
          ->type_name("ISA")
          ->capture_default_str();
      sub.add_option("--threads", args->threads, "Worker threads, 0 = one per hardware thread")
          ->type_name("N")
          ->capture_default_str();
      sub.footer(
          "Arrays are float16, float32 or float64 in C order (float16 is read in place; float64 is read as float32\n"
          "on the fast path; types may differ between files). 4-D is [B, H, N, d] (bhsd) or [B, N, H, d] (bshd),\n"
          "3-D drops B, 2-D is [N, d]. O is written in the layout and rank of Q, dQ/dK/dV in those of Q/K/V; lse,\n"
          "probs and the dropout mask as [B, H, ...] with B (3-D) or B and H (2-D) dropped. The mask, slopes and\n"
          "sinks are in their own axes in every layout. With --do the forward runs first (its lse kept for the\n"
          "backward), then the backward with the same options (the same dropout decisions). O and the gradients\n"
          "are float16 from float16 inputs and float32 otherwise (float64 with --reference; see --out-dtype); lse,\n"
          "probs and dsinks are float32 (float64 with --reference), the dropout mask bool. Outputs are written\n"
          "only when the whole run succeeds.");
      return [args] { return run_run(*args); };
    },
    30,
}};

}  // namespace
}  // namespace sdpa::cli
