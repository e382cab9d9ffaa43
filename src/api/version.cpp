#include "sdpa/version.h"

namespace sdpa {

const char* version() { return SDPA_VERSION_STRING; }

}  // namespace sdpa
