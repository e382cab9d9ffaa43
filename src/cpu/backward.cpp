// The fast backward pass (not yet written).
#include "cpu/driver.h"

namespace sdpa::cpu {

bool backward(const Params&) { return false; }

}  // namespace sdpa::cpu
