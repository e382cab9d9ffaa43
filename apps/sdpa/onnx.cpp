// `sdpa onnx`: the ONNX Attention operator (opsets 23, 24 and 25) on .npy files.
//
// Flags carry the operator's own input, output and attribute names. Inputs
// are read whole and handed to sdpa::onnx::attention as views; every output is
// computed before any file is touched, then staged next to its destination and
// renamed into place together, so a failing run leaves no output behind and
// existing files unchanged.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "io/npy.h"
#include "output_files.h"
#include "sdpa/onnx.h"

namespace sdpa::cli {
namespace {

namespace fs = std::filesystem;

struct OnnxArgs {
  // Inputs.
  std::string q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen;
  // Attributes (empty: the node does not carry it).
  std::string is_causal, scale, softcap, q_num_heads, kv_num_heads, softmax_precision, qk_matmul_output_mode;
  std::string left_window_size, right_window_size;
  std::string opset = "24";
  // Outputs.
  std::string y, present_key, present_value, qk_matmul_output;
  bool reference = false;
};

// The flag of each ONNX input, output and attribute.
constexpr std::pair<const char*, const char*> kFlags[] = {
    {"Q", "--Q"},
    {"K", "--K"},
    {"V", "--V"},
    {"attn_mask", "--attn-mask"},
    {"past_key", "--past-key"},
    {"past_value", "--past-value"},
    {"nonpad_kv_seqlen", "--nonpad-kv-seqlen"},
    {"Y", "--Y"},
    {"present_key", "--present-key"},
    {"present_value", "--present-value"},
    {"qk_matmul_output", "--qk-matmul-output"},
    {"is_causal", "--is-causal"},
    {"scale", "--scale"},
    {"softcap", "--softcap"},
    {"q_num_heads", "--q-num-heads"},
    {"kv_num_heads", "--kv-num-heads"},
    {"softmax_precision", "--softmax-precision"},
    {"qk_matmul_output_mode", "--qk-matmul-output-mode"},
    {"left_window_size", "--left-window-size"},
    {"right_window_size", "--right-window-size"},
    {"opset", "--opset"},
};

std::string flag_of(const std::string& onnx_name) {
  for (const auto& [name, flag] : kFlags)
    if (onnx_name == name) return flag;
  return onnx_name;
}

std::string join_dims(const std::vector<std::int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

struct Input {
  std::string name, flag, path;  // ONNX name, flag, file
  io::NpyArray array;
  TensorView view;
};

Input load(const char* name, const std::string& path) {
  Input in{name, flag_of(name), path, {}, {}};
  try {
    in.array = io::read_npy(path);
    in.view = in.array.view();
  } catch (const std::exception& e) {
    // read_npy's messages start with the path; put the flag in front of it.
    const std::string what = e.what();
    throw std::runtime_error(what.starts_with(path + ":") ? in.flag + " " + what
                                                          : fmt::format("{} {}: {}", in.flag, path, what));
  }
  return in;
}

std::int64_t integer_in(const char* flag, const std::string& text, std::int64_t lo, std::int64_t hi,
                        const std::string& expected) {
  const std::int64_t x = parse_integer(flag, text, lo);
  if (x > hi) throw UsageError(fmt::format("{}: expected {}, got {}", flag, expected, text));
  return x;
}

// Flag values and combinations, checked before any file is read (usage errors).
onnx::AttentionAttributes check_flags(const OnnxArgs& a) {
  onnx::AttentionAttributes attr;
  attr.opset = integer_in("--opset", a.opset, 23, 25, "23, 24 or 25");
  if (!a.is_causal.empty()) attr.is_causal = integer_in("--is-causal", a.is_causal, 0, 1, "0 or 1");
  if (!a.scale.empty()) {
    const double x = parse_finite_double("--scale", a.scale);
    const float f = static_cast<float>(x);
    if (!(x > 0) || !std::isfinite(f) || f == 0.0f)
      throw UsageError(fmt::format("--scale: expected a number > 0 representable in float32, got {}", a.scale));
    attr.scale = f;
  }
  if (!a.softcap.empty()) {
    const double x = parse_finite_double("--softcap", a.softcap);
    if (!(x >= 0) || !std::isfinite(static_cast<float>(x)))
      throw UsageError(
          fmt::format("--softcap: expected 0 (off) or a number > 0 representable in float32, got {}", a.softcap));
    attr.softcap = static_cast<float>(x);
  }
  if (!a.q_num_heads.empty()) attr.q_num_heads = parse_integer("--q-num-heads", a.q_num_heads, 1);
  if (!a.kv_num_heads.empty()) attr.kv_num_heads = parse_integer("--kv-num-heads", a.kv_num_heads, 1);
  if (!a.softmax_precision.empty()) {
    const std::int64_t p = parse_integer("--softmax-precision", a.softmax_precision, 0);
    if (p != 1 && p != 10 && p != 11 && p != 16)
      throw UsageError(fmt::format(
          "--softmax-precision: expected 1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE) or 16 (BFLOAT16), got {}", p));
    attr.softmax_precision = p;
  }
  if (!a.qk_matmul_output_mode.empty())
    attr.qk_matmul_output_mode = integer_in("--qk-matmul-output-mode", a.qk_matmul_output_mode, 0, 3, "0, 1, 2 or 3");
  if (!a.left_window_size.empty()) attr.left_window_size = parse_integer("--left-window-size", a.left_window_size, -1);
  if (!a.right_window_size.empty())
    attr.right_window_size = parse_integer("--right-window-size", a.right_window_size, -1);
  if (attr.opset < 25) {
    for (const auto& [flag, text] :
         {std::pair{"--left-window-size", &a.left_window_size}, std::pair{"--right-window-size", &a.right_window_size}})
      if (!text->empty())
        throw UsageError(fmt::format("{}: the attribute exists from opset 25, got --opset {}", flag, attr.opset));
  }

  if (!a.nonpad_kv_seqlen.empty() && attr.opset < 24)
    throw UsageError(fmt::format("--nonpad-kv-seqlen: the input exists from opset 24, got --opset {}", attr.opset));
  if (a.past_key.empty() != a.past_value.empty())
    throw UsageError(a.past_key.empty() ? "--past-value: expected --past-key with it (they go together)"
                                        : "--past-key: expected --past-value with it (they go together)");
  if (!a.nonpad_kv_seqlen.empty() && !a.past_key.empty())
    throw UsageError("--nonpad-kv-seqlen: cannot be combined with --past-key/--past-value (two KV cache modes)");

  // Two outputs on one path would silently overwrite each other.
  std::vector<std::pair<std::string, std::string>> outs = {{"--Y", a.y}};
  if (!a.present_key.empty()) outs.emplace_back("--present-key", a.present_key);
  if (!a.present_value.empty()) outs.emplace_back("--present-value", a.present_value);
  if (!a.qk_matmul_output.empty()) outs.emplace_back("--qk-matmul-output", a.qk_matmul_output);
  for (std::size_t i = 0; i < outs.size(); ++i)
    for (std::size_t j = i + 1; j < outs.size(); ++j)
      if (fs::absolute(outs[i].second).lexically_normal() == fs::absolute(outs[j].second).lexically_normal())
        throw UsageError(fmt::format("{} and {} name the same file {}", outs[i].first, outs[j].first, outs[j].second));
  return attr;
}

int run_onnx(const OnnxArgs& args) {
  onnx::AttentionAttributes attr = check_flags(args);
  std::vector<std::pair<std::string, std::string>> destinations = {{"--Y", args.y}};
  if (!args.present_key.empty()) destinations.emplace_back("--present-key", args.present_key);
  if (!args.present_value.empty()) destinations.emplace_back("--present-value", args.present_value);
  if (!args.qk_matmul_output.empty()) destinations.emplace_back("--qk-matmul-output", args.qk_matmul_output);
  for (const auto& [flag, path] : destinations) check_destination(flag, path);

  std::vector<Input> inputs;
  inputs.push_back(load("Q", args.q));
  inputs.push_back(load("K", args.k));
  inputs.push_back(load("V", args.v));
  const std::pair<const char*, const std::string*> optional[] = {{"attn_mask", &args.attn_mask},
                                                                 {"past_key", &args.past_key},
                                                                 {"past_value", &args.past_value},
                                                                 {"nonpad_kv_seqlen", &args.nonpad_kv_seqlen}};
  for (const auto& [name, path] : optional)
    if (!path->empty()) inputs.push_back(load(name, *path));

  onnx::AttentionInputs in;
  for (const Input& x : inputs) {
    if (x.name == "Q") in.Q = x.view;
    if (x.name == "K") in.K = x.view;
    if (x.name == "V") in.V = x.view;
    if (x.name == "attn_mask") in.attn_mask = x.view;
    if (x.name == "past_key") in.past_key = x.view;
    if (x.name == "past_value") in.past_value = x.view;
    if (x.name == "nonpad_kv_seqlen") in.nonpad_kv_seqlen = x.view;
  }
  // 3-D inputs need the head counts: a missing flag is a usage error.
  if (in.Q.rank == 3) {
    for (const auto& [flag, value] :
         {std::pair{"--q-num-heads", &attr.q_num_heads}, std::pair{"--kv-num-heads", &attr.kv_num_heads}})
      if (!*value)
        throw UsageError(fmt::format("{}: required for 3-D --Q {} {} (B, Sq, q_num_heads·D)", flag, args.q,
                                     join_dims(inputs[0].array.shape)));
  }

  onnx::AttentionOutputs out;
  out.want_present_key = !args.present_key.empty();
  out.want_present_value = !args.present_value.empty();
  out.want_qk_matmul_output = !args.qk_matmul_output.empty();
  try {
    onnx::attention(in, attr, out, args.reference);
  } catch (const Error& e) {
    if (e.arg().empty()) throw;
    const std::string flag = flag_of(e.arg());
    const std::string detail = fmt::format("expected {}, got {}", e.expected(), e.got());
    for (const Input& x : inputs)
      if (x.name == e.arg()) throw std::runtime_error(fmt::format("{} {}: {}", x.flag, x.path, detail));
    for (const auto& [f, path] : destinations)
      if (f == flag) throw std::runtime_error(fmt::format("{} {}: {}", f, path, detail));
    throw std::runtime_error(fmt::format("{}: {}", flag, detail));
  }

  StagedOutputs files("onnx");
  auto stage = [&](const char* flag, const std::string& path, const onnx::Tensor& t) {
    files.stage(flag, path, t.dtype, t.shape, t.data.data());
  };
  stage("--Y", args.y, out.Y);
  if (out.want_present_key) stage("--present-key", args.present_key, out.present_key);
  if (out.want_present_value) stage("--present-value", args.present_value, out.present_value);
  if (out.want_qk_matmul_output) stage("--qk-matmul-output", args.qk_matmul_output, out.qk_matmul_output);
  files.commit();

  // A summary of what was read and written.
  std::vector<std::string> notes;
  if (attr.is_causal) notes.emplace_back("causal");
  if (attr.scale) notes.push_back(fmt::format("scale {}", format_number(*attr.scale)));
  if (attr.softcap > 0) notes.push_back(fmt::format("softcap {}", format_number(attr.softcap)));
  if (out.want_qk_matmul_output) notes.push_back(fmt::format("qk_matmul_output_mode {}", attr.qk_matmul_output_mode));
  fmt::print("sdpa onnx: Attention-{}, {}{}{}\n\n", attr.opset,
             args.reference ? "reference path (float64)" : "fast path (float32)", notes.empty() ? "" : ", ",
             fmt::join(notes, ", "));
  Table t({{"", Justify::left}, {"file", Justify::left}, {"dtype", Justify::left}, {"shape", Justify::left}});
  for (const Input& x : inputs) t.add_row({x.flag, x.path, dtype_name(x.array.dtype), join_dims(x.array.shape)});
  const std::pair<const char*, std::pair<const std::string*, const onnx::Tensor*>> outputs[] = {
      {"--Y", {&args.y, &out.Y}},
      {"--present-key", {&args.present_key, &out.present_key}},
      {"--present-value", {&args.present_value, &out.present_value}},
      {"--qk-matmul-output", {&args.qk_matmul_output, &out.qk_matmul_output}}};
  for (const auto& [flag, o] : outputs)
    if (!o.first->empty()) t.add_row({flag, *o.first, dtype_name(o.second->dtype), join_dims(o.second->shape)});
  fmt::print("{}", t.render());
  return kExitOk;
}

const Registrar kRegistrar{Command{
    "onnx",
    "The ONNX Attention operator (opsets 23, 24, 25) on .npy files",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<OnnxArgs>();
      sub.add_option("--Q", a->q, "Q: (B, q_num_heads, Sq, D) or (B, Sq, q_num_heads·D)")
          ->required()
          ->type_name("PATH");
      sub.add_option("--K", a->k, "K: (B, kv_num_heads, Skv, D) or (B, Skv, kv_num_heads·D)")
          ->required()
          ->type_name("PATH");
      sub.add_option("--V", a->v, "V: (B, kv_num_heads, Skv, Dv) or (B, Skv, kv_num_heads·Dv)")
          ->required()
          ->type_name("PATH");
      sub.add_option("--attn-mask", a->attn_mask,
                     "attn_mask: bool or float, broadcastable to (B, q_num_heads, Sq, T); from opset 24 the last axis "
                     "may be shorter than T (padded with -inf)")
          ->type_name("PATH");
      sub.add_option("--past-key", a->past_key, "past_key: (B, kv_num_heads, P, D), with --past-value")
          ->type_name("PATH");
      sub.add_option("--past-value", a->past_value, "past_value: (B, kv_num_heads, P, Dv), with --past-key")
          ->type_name("PATH");
      sub.add_option("--nonpad-kv-seqlen", a->nonpad_kv_seqlen, "nonpad_kv_seqlen: int64 (B) (opset >= 24)")
          ->type_name("PATH");
      sub.add_option("--is-causal", a->is_causal, "is_causal: 0 or 1 (default 0)")->type_name("0|1");
      sub.add_option("--scale", a->scale, "scale: a number > 0 (default 1/√D)")->type_name("S");
      sub.add_option("--softcap", a->softcap, "softcap: 0 (off, the default) or > 0")->type_name("C");
      sub.add_option("--q-num-heads", a->q_num_heads, "q_num_heads (3-D inputs)")->type_name("N");
      sub.add_option("--kv-num-heads", a->kv_num_heads, "kv_num_heads (3-D inputs)")->type_name("N");
      sub.add_option("--softmax-precision", a->softmax_precision,
                     "softmax_precision: 1, 10, 11 or 16 (accepted; the softmax is always computed in float32, "
                     "float64 with --reference)")
          ->type_name("P");
      sub.add_option("--qk-matmul-output-mode", a->qk_matmul_output_mode,
                     "qk_matmul_output_mode: 0 scaled QKᵀ, 1 after softcap, 2 after mask, 3 softmax (default 0)")
          ->type_name("M");
      sub.add_option("--left-window-size", a->left_window_size, "left_window_size (opset 25): -1 or >= 0")
          ->type_name("N");
      sub.add_option("--right-window-size", a->right_window_size, "right_window_size (opset 25): -1 or >= 0")
          ->type_name("N");
      sub.add_option("--opset", a->opset, "Operator set: 23, 24 or 25")->type_name("23|24|25")->capture_default_str();
      sub.add_option("--Y", a->y, "Output Y: Q's rank, (B, q_num_heads, Sq, Dv) or (B, Sq, q_num_heads·Dv)")
          ->required()
          ->type_name("PATH");
      sub.add_option("--present-key", a->present_key, "Also write present_key: (B, kv_num_heads, T, D)")
          ->type_name("PATH");
      sub.add_option("--present-value", a->present_value, "Also write present_value: (B, kv_num_heads, T, Dv)")
          ->type_name("PATH");
      sub.add_option("--qk-matmul-output", a->qk_matmul_output,
                     "Also write qk_matmul_output: (B, q_num_heads, Sq, T) at --qk-matmul-output-mode")
          ->type_name("PATH");
      sub.add_flag("--reference", a->reference, "Compute with the float64 oracle (outputs keep their ONNX types)");
      sub.footer(
          "Arrays are C-order .npy files: Q, K, past_key float16, float32 or float64 (one type T1), V and past_value\n"
          "likewise (T2); attn_mask bool or numeric; nonpad_kv_seqlen int64. Outputs are written in ONNX's types\n"
          "(Y, present_key, qk_matmul_output: T1; present_value: T2), only when the whole run succeeds. The\n"
          "computation is float32 (float64 with --reference) whatever the types and softmax_precision.");
      return [a] { return run_onnx(*a); };
    },
    35,
}};

}  // namespace
}  // namespace sdpa::cli
