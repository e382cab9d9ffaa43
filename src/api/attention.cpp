// The public entry points: validate once, then run the fast path or the oracle.
#include "sdpa/attention.h"

#include "cpu/driver.h"
#include "params.h"
#include "reference/attention_ref.h"

namespace sdpa {

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
               const Options& opt) {
  cpu::run(make_params(Call{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = Path::fast}));
}

void reference_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                         const Options& opt) {
  reference::run(make_params(Call{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = Path::reference}));
}

}  // namespace sdpa
