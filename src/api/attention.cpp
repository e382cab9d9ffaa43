// The public entry points: validate once, then run the fast path or the oracle.
#include "sdpa/attention.h"

#include <new>
#include <string>

#include "cpu/driver.h"
#include "params.h"
#include "reference/attention_ref.h"
#include "sdpa/error.h"

namespace sdpa {

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
               const Options& opt) {
  cpu::run(make_params(Call{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = Path::fast}));
}

void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                         const Options& opt) {
  const Params p = make_params(Call{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = Path::reference});
  try {
    reference::run(p);
  } catch (const std::bad_alloc&) {
    // The oracle's rows of Nkv scores and dv sums.
    throw Error("o", "a call whose working memory (Nkv + dv doubles) can be allocated",
                "Nkv=" + std::to_string(p.n_kv) + ", dv=" + std::to_string(p.dv) + ": out of memory");
  }
}

}  // namespace sdpa
