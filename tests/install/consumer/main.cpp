// A program that uses sdpa as an outside project would: public headers only.
#include <sdpa/attention.h>
#include <sdpa/serving.h>
#include <sdpa/version.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  if (std::strcmp(sdpa::version(), SDPA_VERSION_STRING) != 0) {
    std::fprintf(stderr, "headers say %s, library says %s\n", SDPA_VERSION_STRING, sdpa::version());
    return 1;
  }
  const std::int64_t b = 1, h = 2, n = 37, d = 16;
  std::vector<float> q(b * h * n * d), k(q.size()), v(q.size()), o(q.size()), o_ref(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.1f * static_cast<float>(i));
    k[i] = std::cos(0.07f * static_cast<float>(i));
    v[i] = std::sin(0.03f * static_cast<float>(i) + 1.0f);
  }
  sdpa::Options opt;
  opt.causal = true;
  auto view = [&](std::vector<float>& x) { return sdpa::TensorView::contiguous(x.data(), {b, h, n, d}); };
  sdpa::attention(view(q), view(k), view(v), view(o), opt);
  sdpa::reference_attention(view(q), view(k), view(v), view(o_ref), opt);
  double err = 0;
  for (std::size_t i = 0; i < o.size(); ++i) err = std::fmax(err, std::fabs(o[i] - o_ref[i]));
  if (!(err < 1e-5)) {
    std::fprintf(stderr, "fast path and oracle differ by %g\n", err);
    return 1;
  }
  // A bad call throws sdpa::Error, and the type is caught across the library boundary.
  try {
    sdpa::attention(view(q), sdpa::TensorView::contiguous(k.data(), {b, 3, n, d}), view(v), view(o), opt);
    std::fprintf(stderr, "a bad call was accepted\n");
    return 1;
  } catch (const sdpa::Error& e) {
    if (e.arg() != "k") {
      std::fprintf(stderr, "unexpected error: %s\n", e.what());
      return 1;
    }
  }
  std::printf("sdpa %s: fast path within %.2g of the oracle (isa %s)\n", sdpa::version(), err,
              sdpa::isa_name(sdpa::resolve_isa(sdpa::Isa::automatic)));
  return 0;
}
