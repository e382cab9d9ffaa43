// The float64 backward oracle (not yet written).
#include "reference/attention_ref.h"
#include "sdpa/error.h"

namespace sdpa::reference {

void backward(const Params&) { throw Error("dq", "a built oracle backward", "none"); }

}  // namespace sdpa::reference
