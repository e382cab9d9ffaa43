// The float64 oracle (see attention_ref.cpp).
#pragma once

#include "params.h"

namespace sdpa::reference {

void run(const Params& p);

}  // namespace sdpa::reference
