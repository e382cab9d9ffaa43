// The tiled, online-softmax forward pass (see driver.cpp).
#pragma once

#include "params.h"

namespace sdpa::cpu {

void run(const Params& p);

}  // namespace sdpa::cpu
