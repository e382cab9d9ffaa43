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

std::string join_dims(const std::vector<std::int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

struct Input {
  std::string name, flag, path;  // ONNX name, flag, file
  io::NpyArray array;
  TensorView view;
};

Input load(const char* name, const std::string& path) {
  Input in{name, route_of(name).flag, path, {}, {}};
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

// Flag syntax, and outputs on distinct files, checked before any file is read
// (usage errors). What the values mean (opsets, ranges, which inputs go
// together) is sdpa::onnx's to check, and the library's.
onnx::AttentionAttributes check_flags(const OnnxArgs& a) {
  onnx::AttentionAttributes attr;
  attr.opset = parse_integer("--opset", a.opset);
  if (!a.is_causal.empty()) attr.is_causal = parse_integer("--is-causal", a.is_causal);
  if (!a.scale.empty()) attr.scale = parse_float32("--scale", a.scale);
  if (!a.softcap.empty()) attr.softcap = parse_float32("--softcap", a.softcap);
  if (!a.q_num_heads.empty()) attr.q_num_heads = parse_integer("--q-num-heads", a.q_num_heads);
  if (!a.kv_num_heads.empty()) attr.kv_num_heads = parse_integer("--kv-num-heads", a.kv_num_heads);
  if (!a.softmax_precision.empty()) attr.softmax_precision = parse_integer("--softmax-precision", a.softmax_precision);
  if (!a.qk_matmul_output_mode.empty())
    attr.qk_matmul_output_mode = parse_integer("--qk-matmul-output-mode", a.qk_matmul_output_mode);
  if (!a.left_window_size.empty()) attr.left_window_size = parse_integer("--left-window-size", a.left_window_size);
  if (!a.right_window_size.empty()) attr.right_window_size = parse_integer("--right-window-size", a.right_window_size);

  check_distinct({{"--Y", a.y},
                  {"--present-key", a.present_key},
                  {"--present-value", a.present_value},
                  {"--qk-matmul-output", a.qk_matmul_output}},
                 {{"--Q", a.q},
                  {"--K", a.k},
                  {"--V", a.v},
                  {"--attn-mask", a.attn_mask},
                  {"--past-key", a.past_key},
                  {"--past-value", a.past_value},
                  {"--nonpad-kv-seqlen", a.nonpad_kv_seqlen}});
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
  onnx::AttentionOutputs out;
  out.want_present_key = !args.present_key.empty();
  out.want_present_value = !args.present_value.empty();
  out.want_qk_matmul_output = !args.qk_matmul_output.empty();
  try {
    onnx::attention(in, attr, out, args.reference);
  } catch (const Error& e) {
    const std::string flag = route_of(e.arg()).flag;
    std::string file;
    for (const Input& x : inputs)
      if (x.flag == flag) file = x.path;
    for (const auto& [f, path] : destinations)
      if (f == flag) file = path;
    throw cli_error(e, file);
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
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--K", a->k, "K: (B, kv_num_heads, Skv, D) or (B, Skv, kv_num_heads·D)")
          ->required()
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--V", a->v, "V: (B, kv_num_heads, Skv, Dv) or (B, Skv, kv_num_heads·Dv)")
          ->required()
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--attn-mask", a->attn_mask,
                     "attn_mask: bool or float, broadcastable to (B, q_num_heads, Sq, T); from opset 24 the last axis "
                     "may be shorter than T (padded with -inf)")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--past-key", a->past_key, "past_key: (B, kv_num_heads, P, D), with --past-value")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--past-value", a->past_value, "past_value: (B, kv_num_heads, P, Dv), with --past-key")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--nonpad-kv-seqlen", a->nonpad_kv_seqlen, "nonpad_kv_seqlen: int64 (B) (opset >= 24)")
          ->type_name("PATH")
          ->check(file_name());
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
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--present-key", a->present_key, "Also write present_key: (B, kv_num_heads, T, D)")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--present-value", a->present_value, "Also write present_value: (B, kv_num_heads, T, Dv)")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--qk-matmul-output", a->qk_matmul_output,
                     "Also write qk_matmul_output: (B, q_num_heads, Sq, T) at --qk-matmul-output-mode")
          ->type_name("PATH")
          ->check(file_name());
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
