// `sdpa stats`: why scores are divided by √d_k, as numbers and as a chart.
//
// For d_k = 1, 2, 4, ... it draws q, k ~ N(0, I) and measures the raw scores
// q·k (std ≈ √d_k) against the scaled ones q·k/√d_k (std ≈ 1), and what the
// softmax over a row of keys makes of each: its largest weight, its entropy
// and the size of its gradient ‖diag(p) − p·pᵀ‖_F. Without scaling the softmax
// saturates as d_k grows: one weight near 1, entropy and gradient near 0.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "output_files.h"
#include "explorer_api.h"
#include "io/npy.h"
#include "teaching_math.h"

namespace sdpa::cli {
namespace {

using teaching::GrowthConfig;
using teaching::GrowthPoint;

// The words of the table and the chart, in English or Korean (--lang).
struct Words {
  const char* heading;     // {keys} {trials} {seed}
  const char* std_scores, *largest, *entropy, *gradient, *raw, *scaled;
  const char* uniform_entropy;  // {keys} {keys} {ln}
  const char* uniform_weight;   // {keys} {keys} {w}
  const char* peak;             // {dk}
  const char* title, *setup;    // setup: {keys} {trials} {seed}
  const char* legend_raw, *legend_scaled, *log_scale;
  const char* p_std, *p_std_sub, *p_max, *p_max_sub, *p_ent, *p_ent_sub, *p_grad, *p_grad_sub;
  const char* ref_entropy;  // {keys} {keys} {ln}
  const char* ref_uniform;  // {keys} {w}
};

constexpr Words kEnglish{
    "Raw scores q·k vs scaled q·k/√d_k, q, k ~ N(0, 1); softmax over {} keys, {} queries per d_k, seed {}\n",
    "std of scores", "largest weight", "entropy (nats)", "gradient size", "raw", "scaled",
    "entropy of a uniform softmax over {} keys: ln {} = {:.4f}\n",
    "largest weight of a uniform softmax over {} keys: 1/{} = {:.4f}\n",
    "without scaling the gradient first rises (largest at d_k = {}), then falls as the softmax saturates\n",
    "Why attention divides scores by √d_k",
    "q, k ~ N(0, 1) in d_k dimensions; softmax over {} keys, {} queries per d_k (seed {}). Made by sdpa stats.",
    "without scaling: softmax(q·k)", "with scaling: softmax(q·k / √d_k)", "log scale",
    "Standard deviation of the scores", "raw q·k grows like √d_k; q·k/√d_k stays near 1",
    "Largest softmax weight", "mean over queries; 1 means one key takes all the attention",
    "Softmax entropy (nats)", "mean over queries; 0 means a one-hot softmax",
    "Softmax gradient size ‖diag(p) − p·pᵀ‖_F", "mean over queries; near 0 the softmax has saturated",
    "uniform over {} keys: ln {} = {:.2f}", "uniform over {} keys: {:.3f}"};

constexpr Words kKorean{
    "원점수 q·k와 스케일된 점수 q·k/√d_k 비교, q, k ~ N(0, 1); 키 {}개에 대한 소프트맥스, d_k마다 쿼리 {}개, 시드 {}\n",
    "점수의 표준편차", "가장 큰 가중치", "엔트로피 (nat)", "기울기 크기", "원점수", "스케일",
    "키 {}개에 대한 균등 소프트맥스의 엔트로피: ln {} = {:.4f}\n",
    "키 {}개에 대한 균등 소프트맥스의 가장 큰 가중치: 1/{} = {:.4f}\n",
    "스케일링하지 않으면 기울기는 처음에 커지다가(d_k = {}에서 가장 큼) 소프트맥스가 포화되면서 작아집니다\n",
    "어텐션 점수는 왜 √d_k로 나눌까",
    "q, k ~ N(0, 1), d_k차원; 키 {}개에 대한 소프트맥스, d_k마다 쿼리 {}개 (시드 {}). sdpa stats로 만듦.",
    "스케일링 없음: softmax(q·k)", "스케일링 있음: softmax(q·k / √d_k)", "로그 축",
    "점수의 표준편차", "원점수 q·k는 √d_k처럼 커지고 q·k/√d_k는 1 근처에 머뭅니다",
    "가장 큰 소프트맥스 가중치", "쿼리 평균; 1이면 키 하나가 어텐션을 모두 가져갑니다",
    "소프트맥스 엔트로피 (nat)", "쿼리 평균; 0이면 한 키에 모두 몰린 소프트맥스",
    "소프트맥스 기울기 크기 ‖diag(p) − p·pᵀ‖_F", "쿼리 평균; 0에 가까우면 소프트맥스가 포화된 것",
    "키 {}개 균등: ln {} = {:.2f}", "키 {}개 균등: {:.3f}"};

// Terminal columns of UTF-8 text: two for a Hangul syllable or jamo, one for any other code point.
std::size_t columns(const std::string& text) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    char32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (std::size_t k = 1; k < len && i + k < text.size(); ++k) cp = (cp << 6) | (text[i + k] & 0x3f);
    n += (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0x1100 && cp <= 0x11ff) || (cp >= 0x3130 && cp <= 0x318f) ? 2 : 1;
    i += len;
  }
  return n;
}

struct StatsArgs {
  std::string lang = "en";
  int dk_max = 1024;
  std::string svg;
  int keys = GrowthConfig{}.keys;
  int trials = GrowthConfig{}.trials;
  std::uint64_t seed = GrowthConfig{}.seed;
};

constexpr const char* kRawColor = "#d9480f";
constexpr const char* kScaledColor = "#1c6bb8";

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Escaped SVG text with "d_k" and "‖_F" drawn with real subscripts.
std::string svg_text(const std::string& s) {
  std::string out = escape(s);
  const std::pair<std::string, std::string> subs[] = {
      {"d_k", "d<tspan baseline-shift=\"sub\" font-size=\"75%\">k</tspan>"},
      {"‖_F", "‖<tspan baseline-shift=\"sub\" font-size=\"75%\">F</tspan>"},
  };
  for (const auto& [from, to] : subs) {
    for (std::size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size())) {
      out.replace(at, from.size(), to);
    }
  }
  return out;
}

// Tick values 0, step, 2·step, ... covering [0, top] with step in {1, 2, 5}·10^k.
std::vector<double> ticks(double top) {
  const double raw = top / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> out;
  for (double v = 0; v <= top * (1 + 1e-9); v += step) out.push_back(v);
  return out;
}

std::string tick_label(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

struct Panel {
  std::string title, subtitle;
  std::function<double(const GrowthPoint&)> raw, scaled;
  double top = 0;            // y range [0, top]; 0 = from the data
  double reference = -1;     // a dashed horizontal line, if >= 0
  std::string reference_label;
};

std::string render_svg(const std::vector<GrowthPoint>& pts, const GrowthConfig& cfg, const Words& w) {
  const double width = 1000, height = 770;
  const double panel_w = 390, panel_h = 220;
  const double left0 = 70, top0 = 165, gap_x = 480, gap_y = 310;
  const double max_entropy = std::log(static_cast<double>(cfg.keys));
  const double uniform = 1.0 / cfg.keys;
  std::vector<Panel> panels = {
      {w.p_std, w.p_std_sub, [](const GrowthPoint& p) { return p.std_raw; },
       [](const GrowthPoint& p) { return p.std_scaled; }, 0, -1, ""},
      {w.p_max, w.p_max_sub, [](const GrowthPoint& p) { return p.raw.max_weight; },
       [](const GrowthPoint& p) { return p.scaled.max_weight; }, 1.0, uniform,
       fmt::format(fmt::runtime(w.ref_uniform), cfg.keys, uniform)},
      {w.p_ent, w.p_ent_sub, [](const GrowthPoint& p) { return p.raw.entropy; },
       [](const GrowthPoint& p) { return p.scaled.entropy; }, 0, max_entropy,
       fmt::format(fmt::runtime(w.ref_entropy), cfg.keys, cfg.keys, max_entropy)},
      {w.p_grad, w.p_grad_sub, [](const GrowthPoint& p) { return p.raw.grad_norm; },
       [](const GrowthPoint& p) { return p.scaled.grad_norm; }, 0, -1, ""},
  };

  std::string svg;
  svg += fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, 'Noto Sans', sans-serif\" font-size=\"13\" "
      "fill=\"#222\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
      width, height);
  svg += "<text x=\"30\" y=\"38\" font-size=\"20\" font-weight=\"600\">" + svg_text(w.title) + "</text>\n";
  svg += "<text x=\"30\" y=\"62\" fill=\"#555\">" +
         svg_text(fmt::format(fmt::runtime(w.setup), cfg.keys, cfg.trials, cfg.seed)) + "</text>\n";
  // Legend.
  svg += fmt::format(
      "<line x1=\"30\" y1=\"92\" x2=\"58\" y2=\"92\" stroke=\"{0}\" stroke-width=\"3\"/>"
      "<circle cx=\"44\" cy=\"92\" r=\"3.5\" fill=\"{0}\"/>"
      "<text x=\"66\" y=\"96\">{2}</text>\n"
      "<line x1=\"300\" y1=\"92\" x2=\"328\" y2=\"92\" stroke=\"{1}\" stroke-width=\"3\"/>"
      "<circle cx=\"314\" cy=\"92\" r=\"3.5\" fill=\"{1}\"/>"
      "<text x=\"336\" y=\"96\">{3}</text>\n",
      kRawColor, kScaledColor, svg_text(w.legend_raw), svg_text(w.legend_scaled));

  const double lx_min = std::log2(static_cast<double>(pts.front().dk));
  const double lx_max = std::max(std::log2(static_cast<double>(pts.back().dk)), lx_min + 1);
  for (std::size_t pi = 0; pi < panels.size(); ++pi) {
    const Panel& panel = panels[pi];
    const double x0 = left0 + gap_x * static_cast<double>(pi % 2);
    const double y0 = top0 + gap_y * static_cast<double>(pi / 2);
    double top = panel.top;
    if (top <= 0) {
      for (const GrowthPoint& p : pts) top = std::max({top, panel.raw(p), panel.scaled(p)});
      top = std::max(top, panel.reference) * 1.08;
      if (top <= 0) top = 1;
    }
    const std::vector<double> yt = ticks(top);
    top = std::max(top, yt.back());
    auto X = [&](int dk) { return x0 + (std::log2(static_cast<double>(dk)) - lx_min) / (lx_max - lx_min) * panel_w; };
    auto Y = [&](double v) { return y0 + panel_h - v / top * panel_h; };

    svg += fmt::format("<g>\n<text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"600\">{}</text>\n", x0 - 40,
                       y0 - 30, svg_text(panel.title));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#666\" font-size=\"12\">{}</text>\n", x0 - 40, y0 - 12,
                       svg_text(panel.subtitle));
    for (double v : yt) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e6e6e6\"/>"
          "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" fill=\"#666\" font-size=\"11\">{5}</text>\n",
          x0, Y(v), x0 + panel_w, x0 - 6, Y(v) + 4, tick_label(v));
    }
    for (const GrowthPoint& p : pts) {
      const bool power = (p.dk & (p.dk - 1)) == 0;
      const int l2 = static_cast<int>(std::lround(std::log2(static_cast<double>(p.dk))));
      svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#f0f0f0\"/>", X(p.dk),
                         y0, y0 + panel_h);
      if (!power || l2 % 2 == 0 || pts.size() <= 6 || &p == &pts.back()) {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#666\" font-size=\"11\">{}</text>",
                           X(p.dk), y0 + panel_h + 16, p.dk);
      }
      svg += "\n";
    }
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#999\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"middle\" fill=\"#555\" font-size=\"12\">{5} ({6})</text>\n",
        x0, y0 + panel_h, x0 + panel_w, x0 + panel_w / 2, y0 + panel_h + 34, svg_text("d_k"), svg_text(w.log_scale));
    if (panel.reference >= 0) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#888\" stroke-dasharray=\"4 4\"/>"
          "<text x=\"{2:.1f}\" y=\"{3:.1f}\" text-anchor=\"end\" fill=\"#777\" font-size=\"11\">{4}</text>\n",
          x0, Y(panel.reference), x0 + panel_w, Y(panel.reference) - 5, svg_text(panel.reference_label));
    }
    for (int side = 0; side < 2; ++side) {
      const auto& f = side == 0 ? panel.raw : panel.scaled;
      const char* color = side == 0 ? kRawColor : kScaledColor;
      std::string path;
      for (const GrowthPoint& p : pts) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", X(p.dk), Y(f(p)));
      svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.5\" stroke-linejoin=\"round\"/>\n",
                         path, color);
      for (const GrowthPoint& p : pts) {
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>d = {}: {:.4g}</title></circle>",
                           X(p.dk), Y(f(p)), color, p.dk, f(p));
      }
      svg += "\n";
    }
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

int run_stats(const StatsArgs& args) {
  // A destination that cannot work fails before the curve is computed.
  if (!args.svg.empty()) check_destination("--svg", args.svg);
  GrowthConfig cfg;
  cfg.keys = args.keys;
  cfg.trials = args.trials;
  cfg.seed = args.seed;
  const std::vector<GrowthPoint> pts = teaching::growth_curve(args.dk_max, cfg);

  const Words& w = args.lang == "ko" ? kKorean : kEnglish;
  fmt::print(fmt::runtime(w.heading), cfg.keys, cfg.trials, cfg.seed);
  // Columns padded by display width: Korean headers are wider per code point.
  auto pad = [](const std::string& text, std::size_t width) {
    const std::size_t used = columns(text);
    const std::size_t left = used < width ? (width - used) / 2 : 0;
    const std::size_t right = used < width ? width - used - left : 0;
    return std::string(left, ' ') + text + std::string(right, ' ');
  };
  auto right = [](const std::string& text, std::size_t width) {
    const std::size_t used = columns(text);
    return std::string(used < width ? width - used : 0, ' ') + text;
  };
  fmt::print("{:>6} {:>7} | {} | {} | {} | {}\n", "", "", pad(w.std_scores, 19), pad(w.largest, 21), pad(w.entropy, 19),
             pad(w.gradient, 19));
  fmt::print("{:>6} {:>7} | {} {} | {} {} | {} {} | {} {}\n", "d_k", "√d_k", right(w.raw, 9), right(w.scaled, 9),
             right(w.raw, 10), right(w.scaled, 10), right(w.raw, 9), right(w.scaled, 9), right(w.raw, 9),
             right(w.scaled, 9));
  for (const GrowthPoint& p : pts) {
    fmt::print("{:>6} {:>7.3f} | {:>9.3f} {:>9.3f} | {:>10.4f} {:>10.4f} | {:>9.4f} {:>9.4f} | {:>9.4f} {:>9.4f}\n", p.dk,
               std::sqrt(static_cast<double>(p.dk)), p.std_raw, p.std_scaled, p.raw.max_weight, p.scaled.max_weight,
               p.raw.entropy, p.scaled.entropy, p.raw.grad_norm, p.scaled.grad_norm);
  }
  fmt::print(fmt::runtime(w.uniform_entropy), cfg.keys, cfg.keys, std::log(static_cast<double>(cfg.keys)));
  fmt::print(fmt::runtime(w.uniform_weight), cfg.keys, cfg.keys, 1.0 / cfg.keys);
  if (const int peak = teaching::raw_gradient_peak(pts); peak > pts.front().dk && peak < pts.back().dk) {
    fmt::print(fmt::runtime(w.peak), peak);
  }
  std::fflush(stdout);
  if (!args.svg.empty()) {
    // A temporary file in the same folder, fsynced, renamed over the target.
    const std::string svg = render_svg(pts, cfg, args.lang == "ko" ? kKorean : kEnglish);
    io::write_file_atomic(args.svg, svg.data(), svg.size());
    std::fprintf(stderr, "wrote %s\n", args.svg.c_str());
  }
  return kExitOk;
}

const Registrar registrar{Command{
    "stats",
    "Show why scores are divided by √d_k: score spread and softmax saturation against d_k",
    [](CLI::App& sub) {
      auto args = std::make_shared<StatsArgs>();
      sub.add_option("--dk-max", args->dk_max, "Largest d_k (the curve runs over 1, 2, 4, ... up to it)")
          ->capture_default_str()
          ->check(CLI::Range(1, 16384));
      sub.add_option("--svg", args->svg, "Also write the chart as SVG to this file (atomically)")
          ->type_name("PATH")
          ->check(file_name());
      sub.add_option("--keys", args->keys, "Keys per softmax row")
          ->capture_default_str()
          ->check(CLI::Range(explorer::kMinKeys, explorer::kMaxKeys));
      sub.add_option("--trials", args->trials, "Queries (softmax rows) per d_k")
          ->capture_default_str()
          ->check(CLI::Range(explorer::kMinTrials, explorer::kMaxTrials));
      sub.add_option("--seed", args->seed, "Random seed")->capture_default_str();
      sub.add_option("--lang", args->lang, "Language of the table and the chart: en (English) or ko (Korean, 한국어)")
          ->capture_default_str()
          ->check(CLI::IsMember({"en", "ko"}));
      return [args] { return run_stats(*args); };
    },
    61,
}};

}  // namespace
}  // namespace sdpa::cli
