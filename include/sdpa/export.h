// SDPA_API marks the public functions and types: the only symbols a shared
// libsdpa exports (everything else is built with hidden visibility, and the
// linker's version script keeps the dynamic symbol table to namespace sdpa).
#pragma once

#if defined(_WIN32)
#if defined(SDPA_SHARED_LIBRARY) && defined(SDPA_BUILDING_LIBRARY)
#define SDPA_API __declspec(dllexport)
#elif defined(SDPA_SHARED_LIBRARY)
#define SDPA_API __declspec(dllimport)
#else
#define SDPA_API
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define SDPA_API __attribute__((visibility("default")))
#else
#define SDPA_API
#endif
