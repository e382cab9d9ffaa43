// The tiled, online-softmax forward pass (see driver.cpp) and its backward.
#pragma once

#include "params.h"

namespace sdpa::cpu {

void run(const Params& p);

// The backward pass (src/cpu/backward.cpp) of a Params with backward set.
// Returns false, with the gradients partly written, when one of them is not
// finite: the caller then recomputes them in float64.
bool backward(const Params& p);

}  // namespace sdpa::cpu
