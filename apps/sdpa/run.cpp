// `sdpa run`: attention on .npy files.
//
// Inputs are read whole, interpreted in the chosen layout and handed to the
// library as views (float32 files in [B, N, H, d] memory are not copied; the
// bshd view's strides do the transposition). Every output is computed before
// any file is touched, and the files are then staged next to their
// destinations and renamed into place together, so a failing run leaves no
// output of its own behind and existing files unchanged.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "io/npy.h"
#include "output_files.h"
#include "sdpa/attention.h"
#include "sdpa/serving.h"

namespace sdpa::cli {
namespace {

namespace fs = std::filesystem;

enum class Layout { bhsd, bshd };

struct RunArgs {
  std::string q, k, v, out, lse, probs;
  std::string scale;  // empty: the library's default 1/√d
  bool causal = false;
  std::string layout = "bhsd";
  bool reference = false;
  std::string isa = "auto";
  std::string threads = "0";
  std::string cu_seqlens_q, cu_seqlens_k;  // packed variable-length batches
  std::string window_left = "-1", window_right = "-1";
  std::string softcap;
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
  std::vector<float> converted;  // float64 file on the fast path
  std::array<std::int64_t, 4> dims{};
  TensorView view;
};

Input load_input(const std::string& flag, const std::string& path, Layout layout, bool reference) {
  Input in;
  in.name = {flag, path};
  try {
    in.array = io::read_npy(path);
  } catch (const std::exception& e) {
    // read_npy's messages start with the path; put the flag in front of it.
    const std::string what = e.what();
    throw std::runtime_error(what.starts_with(path + ":") ? flag + " " + what
                                                          : fmt::format("{} {}: {}", flag, path, what));
  }
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
  if (a.dtype == DType::f64 && !reference) {
    // The fast path is float32-only.
    const double* src = a.as<double>();
    in.converted.assign(src, src + a.numel());
    in.view = layout_view(in.converted.data(), DType::f32, in.dims, layout);
  } else {
    in.view = layout_view(a.data.data(), a.dtype, in.dims, layout);
  }
  return in;
}

// One output array, computed in memory before anything is written.
struct Output {
  Named name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> file_shape;
  std::vector<std::byte> bytes;
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

// A library error in the command line's words, with the file its flag named
// and, for an input, how the file was read.
CliError named_error(const Error& e, const std::vector<const Input*>& inputs, const std::vector<Output>& outputs) {
  const std::string flag = route_of(e.arg()).flag;
  for (const Input* in : inputs) {
    if (in->name.flag == flag) {
      return cli_error(e, in->name.path,
                       fmt::format(" (file shape {}, read as [B, H, N, d] = {})", join_dims(in->array.shape),
                                   join_dims({in->dims.begin(), in->dims.end()})));
    }
  }
  for (const Output& out : outputs)
    if (out.name.flag == flag) return cli_error(e, out.name.path);
  return cli_error(e);
}

struct Settings {
  Layout layout = Layout::bhsd;
  std::optional<double> scale;
  std::int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  Isa isa = Isa::automatic;
  int threads = 0;
};

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
  if (!args.scale.empty()) s.scale = parse_finite_double("--scale", args.scale);
  s.isa = parse_isa(args.isa);
  s.threads = parse_int("--threads", args.threads);
  s.window_left = parse_integer("--window-left", args.window_left);
  s.window_right = parse_integer("--window-right", args.window_right);
  if (!args.softcap.empty()) s.softcap = parse_finite_double("--softcap", args.softcap);
  if (args.cu_seqlens_q.empty() != args.cu_seqlens_k.empty())
    throw UsageError("--cu-seqlens-q and --cu-seqlens-k: expected both (a packed batch) or neither");
  if (!args.cu_seqlens_q.empty() && !args.probs.empty())
    throw UsageError("--probs: not available with packed sequences (--cu-seqlens-q/k)");

  check_distinct({{"--out", args.out}, {"--lse", args.lse}, {"--probs", args.probs}},
                 {{"--q", args.q},
                  {"--k", args.k},
                  {"--v", args.v},
                  {"--cu-seqlens-q", args.cu_seqlens_q},
                  {"--cu-seqlens-k", args.cu_seqlens_k}});
  return s;
}

Options base_options(const RunArgs& args, const Settings& s) {
  Options opt;
  opt.scale = s.scale;
  opt.causal = args.causal;
  opt.isa = s.isa;
  opt.threads = s.threads;
  opt.window_left = s.window_left;
  opt.window_right = s.window_right;
  opt.softcap = s.softcap;
  return opt;
}

// int32/int64 prefix sums [n + 1].
io::NpyArray load_cu(const std::string& flag, const std::string& path) {
  io::NpyArray a;
  try {
    a = io::read_npy(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{} {}", flag, e.what()));
  }
  return a;
}

// Packed variable-length batch: Q [total_q, H, d], K/V [total_k, Hkv, d|dv],
// O [total_q, H, dv], lse [H, total_q]; sequence s is rows cu[s] .. cu[s+1].
int run_packed(const RunArgs& args, const Settings& s) {
  const Named out_name{"--out", args.out};
  check_destination(out_name.flag, out_name.path);
  if (!args.lse.empty()) check_destination("--lse", args.lse);
  io::NpyArray cu_q = load_cu("--cu-seqlens-q", args.cu_seqlens_q), cu_k = load_cu("--cu-seqlens-k", args.cu_seqlens_k);
  std::vector<Input> in;
  for (auto [flag, path] : {std::pair{"--q", &args.q}, std::pair{"--k", &args.k}, std::pair{"--v", &args.v}}) {
    Input x;
    x.name = {flag, *path};
    try {
      x.array = io::read_npy(*path);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{} {}", flag, e.what()));
    }
    const io::NpyArray& a = x.array;
    // Packed arrays are 3-D (the rank is the form; dtype and sizes are the library's).
    if (a.shape.size() != 3)
      throw UsageError(fmt::format("{}: expected a 3-D array [total, heads, d] with --cu-seqlens-q/k, got {} {}",
                                   x.name.who(), dtype_name(a.dtype), join_dims(a.shape)));
    if (a.dtype == DType::f64 && !args.reference) {
      const double* src = a.as<double>();
      x.converted.assign(src, src + a.numel());
      x.view = TensorView::contiguous(x.converted.data(), DType::f32, {a.shape[0], a.shape[1], a.shape[2]});
    } else {
      x.view = TensorView::contiguous(a.data.data(), a.dtype, {a.shape[0], a.shape[1], a.shape[2]});
    }
    in.push_back(std::move(x));
  }
  const std::int64_t tq = in[0].array.shape[0], h = in[0].array.shape[1], dv = in[2].array.shape[2];
  const DType out_dtype = args.reference ? DType::f64 : DType::f32;
  std::vector<Output> outputs;
  outputs.push_back(make_output(out_name, out_dtype, {tq, h, dv}));
  if (!args.lse.empty()) outputs.push_back(make_output({"--lse", args.lse}, out_dtype, {h, tq}));
  Options opt = base_options(args, s);
  if (!args.lse.empty()) opt.lse = TensorView::contiguous(outputs[1].bytes.data(), out_dtype, {h, tq});
  try {
    attention_varlen(in[0].view, in[1].view, in[2].view,
                     TensorView::contiguous(outputs[0].bytes.data(), out_dtype, {tq, h, dv}), cu_q.view(), cu_k.view(),
                     opt, -1, -1, args.reference);
  } catch (const Error& e) {
    const std::string flag = route_of(e.arg()).flag;
    std::string file;
    for (const Input& x : in)
      if (x.name.flag == flag) file = x.name.path;
    for (const Output& out : outputs)
      if (out.name.flag == flag) file = out.name.path;
    if (flag == "--cu-seqlens-q") file = args.cu_seqlens_q;
    if (flag == "--cu-seqlens-k") file = args.cu_seqlens_k;
    throw cli_error(e, file);
  }
  StagedOutputs files("run");
  for (const Output& out : outputs)
    files.stage(out.name.flag, out.name.path, out.dtype, out.file_shape, out.bytes.data());
  files.commit();
  fmt::print("sdpa run: packed batch of {} sequences ({} query rows), {} path; wrote {}{}\n", cu_q.numel() - 1, tq,
             args.reference ? "reference" : "fast", args.out, args.lse.empty() ? "" : " and " + args.lse);
  return kExitOk;
}

int run_run(const RunArgs& args) {
  const Settings s = check_flags(args);
  if (!args.cu_seqlens_q.empty()) return run_packed(args, s);
  const Named out_name{"--out", args.out};
  check_destination(out_name.flag, out_name.path);
  if (!args.lse.empty()) check_destination("--lse", args.lse);
  if (!args.probs.empty()) check_destination("--probs", args.probs);

  const Input q = load_input("--q", args.q, s.layout, args.reference);
  const Input k = load_input("--k", args.k, s.layout, args.reference);
  const Input v = load_input("--v", args.v, s.layout, args.reference);
  const int rank = static_cast<int>(q.array.shape.size());
  for (const Input* in : {&k, &v}) {
    if (in->array.shape.size() != q.array.shape.size()) {
      throw UsageError(fmt::format("{}: expected rank {} like --q {} ({} for layout {}), got rank {} {}",
                                           in->name.who(), rank, q.name.path, layout_axes(s.layout, rank),
                                           args.layout, in->array.shape.size(), join_dims(in->array.shape)));
    }
  }

  const std::int64_t b = q.dims[0], h = q.dims[1], n_q = q.dims[2], n_kv = k.dims[2], dv = v.dims[3];
  // The library refuses a larger P too, but only after the caller has allocated it.
  if (!args.probs.empty()) {
    std::int64_t count = 1;
    bool overflow = false;
    for (std::int64_t x : {b, h, n_q, n_kv}) overflow |= x < 0 || __builtin_mul_overflow(count, x, &count);
    if (overflow || count > kMaxProbsElements) {
      throw cli_error(Error("probs", fmt::format("at most {} elements (B*H*Nq*Nkv)", kMaxProbsElements),
                            fmt::format("{}*{}*{}*{}{}", b, h, n_q, n_kv, overflow ? "" : fmt::format(" = {}", count))),
                      args.probs);
    }
  }

  const DType out_dtype = args.reference ? DType::f64 : DType::f32;
  std::vector<Output> outputs;
  outputs.push_back(make_output(out_name, out_dtype, from_bhnd({b, h, n_q, dv}, s.layout, rank)));
  if (!args.lse.empty()) outputs.push_back(make_output({"--lse", args.lse}, out_dtype, rank_adjusted({b, h, n_q}, rank)));
  if (!args.probs.empty()) {
    outputs.push_back(make_output({"--probs", args.probs}, out_dtype, rank_adjusted({b, h, n_q, n_kv}, rank)));
  }

  Options opt = base_options(args, s);
  std::size_t next = 1;
  if (!args.lse.empty()) opt.lse = TensorView::contiguous(outputs[next++].bytes.data(), out_dtype, {b, h, n_q});
  if (!args.probs.empty()) {
    opt.probs = TensorView::contiguous(outputs[next++].bytes.data(), out_dtype, {b, h, n_q, n_kv});
  }
  const TensorView o = layout_view(outputs[0].bytes.data(), out_dtype, {b, h, n_q, dv}, s.layout);
  try {
    if (args.reference) {
      reference_attention(q.view, k.view, v.view, o, opt);
    } else {
      attention(q.view, k.view, v.view, o, opt);
    }
  } catch (const Error& e) {
    throw named_error(e, {&q, &k, &v}, outputs);
  }

  StagedOutputs files("run");
  for (const Output& out : outputs)
    files.stage(out.name.flag, out.name.path, out.dtype, out.file_shape, out.bytes.data());
  files.commit();

  // A summary of what was read and written.
  const double scale = s.scale ? *s.scale : 1.0 / std::sqrt(static_cast<double>(q.dims[3]));
  const int threads = s.threads > 0 ? s.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  fmt::print("sdpa run: {}, layout {}, scale {}{}{}\n\n",
             args.reference ? "reference path (float64 oracle)"
                            : fmt::format("fast path ({}, {} threads)", isa_name(resolve_isa(s.isa)), threads),
             args.layout, format_number(scale), s.scale ? "" : fmt::format(" (1/√{})", q.dims[3]),
             args.causal ? ", causal" : "");
  Table t({{"array", Justify::left},
           {"file", Justify::left},
           {"dtype", Justify::left},
           {"shape", Justify::left},
           {"as [B, H, N, d]", Justify::left}});
  for (const Input* in : {&q, &k, &v}) {
    t.add_row({in->name.flag, in->name.path, dtype_name(in->array.dtype), join_dims(in->array.shape),
               join_dims({in->dims.begin(), in->dims.end()})});
  }
  for (const Output& out : outputs) {
    t.add_row({out.name.flag, out.name.path, dtype_name(out.dtype), join_dims(out.file_shape),
               out.name.flag == "--out" ? join_dims({b, h, n_q, dv}) : ""});
  }
  fmt::print("{}", t.render());
  return kExitOk;
}

const Registrar kRegistrar{Command{
    "run",
    "Compute attention on .npy files (float32 or float64, C order)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<RunArgs>();
      sub.add_option("--q", args->q, "Queries Q.npy: [B, H, Nq, d] (see --layout; 3-D drops B, 2-D drops B and H)")
          ->required()
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--k", args->k, "Keys K.npy: [B, Hkv, Nkv, d], Hkv dividing H")->required()->type_name("PATH")
          ->check(file_name());
      sub.add_option("--v", args->v, "Values V.npy: [B, Hkv, Nkv, dv]")->required()->type_name("PATH")
          ->check(file_name());
      sub.add_option("--out", args->out, "Output O.npy: [B, H, Nq, dv] in the layout and rank of Q")
          ->required()
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--lse", args->lse, "Also write the log-sum-exp per query: [B, H, Nq] (rank-adjusted)")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--probs", args->probs,
                     fmt::format("Also write the probabilities: [B, H, Nq, Nkv] (rank-adjusted, at most {} elements)",
                                 kMaxProbsElements))
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--scale", args->scale, "Score scale, a finite number > 0 (default 1/√d)")->type_name("S");
      sub.add_flag("--causal", args->causal, "Causal mask aligned to the bottom-right corner");
      sub.add_option("--layout", args->layout, "Memory layout of all arrays: bhsd = [B, H, N, d], bshd = [B, N, H, d]")
          ->type_name("bhsd|bshd")
          ->capture_default_str();
      sub.add_option("--window-left", args->window_left,
                     "Sliding window: a query at position p sees keys j >= p - LEFT (-1 = unbounded)")
          ->type_name("LEFT")
          ->capture_default_str();
      sub.add_option("--window-right", args->window_right, "Sliding window: keys j <= p + RIGHT (-1 = unbounded)")
          ->type_name("RIGHT")
          ->capture_default_str();
      sub.add_option("--softcap", args->softcap, "Softcap c > 0: s <- c·tanh(s/c) on the scaled scores (0 = off)")->type_name("C");
      sub.add_option("--cu-seqlens-q", args->cu_seqlens_q,
                     "Packed batch: int32/int64 prefix sums [n + 1] of query rows; Q, O are then [total_q, H, d]")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--cu-seqlens-k", args->cu_seqlens_k,
                     "Packed batch: prefix sums [n + 1] of key rows; K, V are then [total_k, Hkv, d]")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_flag("--reference", args->reference,
                   "Use the float64 oracle (float64 inputs stay float64; writes float64)");
      sub.add_option("--isa", args->isa, "Kernel instruction set: " + isa_choices())
          ->type_name("ISA")
          ->capture_default_str();
      sub.add_option("--threads", args->threads, "Worker threads, 0 = one per hardware thread")
          ->type_name("N")
          ->capture_default_str();
      sub.footer(
          "Arrays are float32 or float64 in C order. 4-D is [B, H, N, d] (bhsd) or [B, N, H, d] (bshd), 3-D drops B,\n"
          "2-D is [N, d]. O is written in the layout and rank of Q; lse and probs as [B, H, ...] with B (3-D) or\n"
          "B and H (2-D) dropped. Outputs are float32 (float64 with --reference) and are written only when the whole\n"
          "run succeeds.");
      return [args] { return run_run(*args); };
    },
    30,
}};

}  // namespace
}  // namespace sdpa::cli
