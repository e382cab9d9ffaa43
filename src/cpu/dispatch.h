// Runtime ISA dispatch: chosen once per call at the API boundary, never per tile.
#pragma once

#include "cpu/kernels/kernel_set.h"
#include "sdpa/options.h"

namespace sdpa::cpu {

// The best ISA this CPU and OS support among those compiled in.
Isa detect_isa();
// Resolves Isa::automatic (honouring SDPA_ISA) and checks that the CPU supports
// the result; throws sdpa::Error naming "isa" (or "SDPA_ISA") otherwise.
Isa select_isa(Isa requested);
// The kernels for a resolved, supported ISA.
const KernelSet& kernels_for(Isa isa);

}  // namespace sdpa::cpu
