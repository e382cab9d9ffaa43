// `sdpa explain`: the 1/√d_k scaling of one score, worked through with numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"

namespace sdpa::cli {
namespace {

struct ExplainArgs {
  // Kept as text so that bad values get a message of ours naming the flag.
  std::string score = "40";
  std::string dk = "64";
};

int run_explain(const ExplainArgs& args) {
  const double score = parse_finite_double("--score", args.score);
  const std::int64_t dk = parse_integer("--dk", args.dk, 1);
  const double root = std::sqrt(static_cast<double>(dk));
  const double scaled = score / root;

  fmt::print("Scaled dot-product attention divides every score q·k by √d_k before the softmax.\n\n");
  Table values({{"quantity", Justify::left}, {"value", Justify::right}});
  values.add_row({"d_k (head size)", format_number(static_cast<double>(dk))});
  values.add_row({"√d_k", format_number(root)});
  values.add_row({"score q·k, raw", format_number(score)});
  values.add_row({"score q·k / √d_k", format_fixed(scaled, 2)});
  fmt::print("{}\n", values.render());

  fmt::print("  {} / √{} = {} / {} = {}\n\n", format_number(score), dk, format_number(score), format_number(root),
             format_fixed(scaled, 2));

  // The slider: the same raw score at other head sizes.
  std::vector<std::int64_t> sizes = {1, 4, 16, 64, 256, 1024, 4096};
  if (std::find(sizes.begin(), sizes.end(), dk) == sizes.end()) {
    sizes.insert(std::upper_bound(sizes.begin(), sizes.end(), dk), dk);
  }
  fmt::print("The same raw score {} at other head sizes:\n\n", format_number(score));
  Table slider({{"d_k", Justify::right}, {"√d_k", Justify::right}, {"score / √d_k", Justify::right}, {"", Justify::left}});
  for (const std::int64_t n : sizes) {
    const double r = std::sqrt(static_cast<double>(n));
    slider.add_row({format_number(static_cast<double>(n)), format_number(r), format_fixed(score / r, 2),
                    n == dk ? "<- --dk" : ""});
  }
  fmt::print("{}\n", slider.render());

  fmt::print(
      "Why divide by √d_k?\n"
      "  If q and k have d_k independent entries drawn from N(0, 1), their dot product\n"
      "  q·k is a sum of d_k terms of variance 1, so it has standard deviation √d_k\n"
      "  ({} for d_k = {}). Scores that spread out push the softmax into saturation:\n"
      "  nearly all the weight lands on the top key and the gradients of the others\n"
      "  vanish. Dividing by √d_k brings the standard deviation back to about 1 for\n"
      "  every head size, so the softmax stays in its responsive range.\n"
      "  Dividing every score by the same positive number never changes their order:\n"
      "  the ranking of the keys is the same, only the weights are less concentrated.\n\n"
      "  See it measured: sdpa demo\n",
      format_number(root), dk);
  return kExitOk;
}

const Registrar kRegistrar{Command{
    "explain",
    "Why attention scales its scores by 1/√d_k, worked through for one score",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ExplainArgs>();
      sub.add_option("--score", args->score, "Raw score q·k to scale (a finite number)")
          ->type_name("NUMBER")
          ->capture_default_str();
      sub.add_option("--dk", args->dk, "Head size d_k (an integer >= 1)")->type_name("INT")->capture_default_str();
      return [args] { return run_explain(*args); };
    },
    10,
}};

}  // namespace
}  // namespace sdpa::cli
