// The float64 oracle (see attention_ref.cpp) and its backward (backward_ref.cpp).
#pragma once

#include "params.h"

namespace sdpa::reference {

void run(const Params& p);

// The float64 backward (backward_ref.cpp) of a Params with backward set.
void backward(const Params& p);

}  // namespace sdpa::reference
