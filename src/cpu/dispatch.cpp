// ISA detection and the kernel table.
//
// An ISA is usable when the CPU reports its instructions (CPUID) *and* the OS
// saves the registers they use (XGETBV: XMM|YMM state for AVX2, plus opmask
// and ZMM state for AVX-512, plus tile configuration and tile data for AMX,
// which Linux enables per process on request). The table is
// stamped from kernels.def: each KernelSet starts from its sizes there and is
// filled by the function of the same name (src/cpu/kernels/<ns>/<name>.cpp).
#include "cpu/dispatch.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu/kernels/kernels.h"
#include "sdpa/attention.h"
#include "sdpa/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sdpa {
namespace cpu {
namespace {

#if defined(__x86_64__)
std::uint64_t xgetbv0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

bool os_saves_ymm() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = (c & bit_OSXSAVE) != 0;
  return osxsave && (xgetbv0() & 0x6) == 0x6;  // XMM and YMM state enabled
}

bool os_saves_zmm() {
  // Opmask, upper halves of ZMM0-15 and ZMM16-31, plus XMM and YMM.
  return os_saves_ymm() && (xgetbv0() & 0xE6) == 0xE6;
}

// CPUID feature bits, read directly (every compiler's <cpuid.h> has them;
// __builtin_cpu_supports does not know "f16c" before clang 16).
struct CpuFeatures {
  bool fma = false, f16c = false, avx2 = false, avx512f = false;
  bool avx512bw = false, avx512vl = false, avx512bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
};

// CPUID.(EAX=7,ECX=1):EAX bit 5, spelled out: not every <cpuid.h> names it.
constexpr unsigned kCpuidAvx512Bf16 = 1u << 5;
// CPUID.(EAX=7,ECX=0):EDX bits 24 (AMX-TILE) and 22 (AMX-BF16), likewise.
constexpr unsigned kCpuidAmxTile = 1u << 24;
constexpr unsigned kCpuidAmxBf16 = 1u << 22;

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = (c & bit_FMA) != 0;
  f.f16c = (c & bit_F16C) != 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    const unsigned max_subleaf = a;
    f.avx2 = (b & bit_AVX2) != 0;
    f.avx512f = (b & bit_AVX512F) != 0;
    f.avx512bw = (b & bit_AVX512BW) != 0;
    f.avx512vl = (b & bit_AVX512VL) != 0;
    f.amx_tile = (d & kCpuidAmxTile) != 0;
    f.amx_bf16 = (d & kCpuidAmxBf16) != 0;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = (a & kCpuidAvx512Bf16) != 0;
  }
  return f;
}

bool cpu_has_avx512() {
  const CpuFeatures f = cpu_features();
  return f.avx512f && f.avx2 && f.fma && f.f16c && os_saves_zmm();
}

// The avx512bf16 file is also built with AVX512BW (its 16-bit masked moves and
// permutes) and AVX512VL (which the compiler may use anywhere in it): every CPU
// with AVX512-BF16 has both, but they are checked rather than assumed.
bool cpu_has_avx512bf16() {
  const CpuFeatures f = cpu_features();
  return cpu_has_avx512() && f.avx512bw && f.avx512vl && f.avx512bf16;
}

// AMX: the amx file is the avx512bf16 file's flags plus AMX-TILE and
// AMX-BF16. Linux enables the 8 KiB tile data state lazily: a process must
// ask for it (arch_prctl ARCH_REQ_XCOMP_PERM, granted to all its threads)
// before its first tile instruction, which otherwise faults. XCR0 then shows
// tile configuration (bit 17) and tile data (bit 18) as OS-managed state.
// Other OSes: not used (no portable way to ask).
bool cpu_has_amx() {
  const CpuFeatures f = cpu_features();
  if (!cpu_has_avx512bf16() || !f.amx_tile || !f.amx_bf16) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  constexpr std::uint64_t kXtileState = (std::uint64_t{1} << 17) | (std::uint64_t{1} << 18);
  return (xgetbv0() & kXtileState) == kXtileState;
#else
  return false;
#endif
}

bool cpu_is_amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
}

bool cpu_has_avx2() {
  const CpuFeatures f = cpu_features();
  return f.avx2 && f.fma && f.f16c && os_saves_ymm();
}
#endif

// Every Isa's name, in the order parse errors list them ("auto" is also
// accepted for automatic).
struct IsaName {
  Isa isa;
  const char* name;
};
constexpr IsaName kIsaNames[] = {{Isa::automatic, "automatic"}, {Isa::scalar, "scalar"},
                                 {Isa::avx2, "avx2"},           {Isa::avx512, "avx512"},
                                 {Isa::avx512bf16, "avx512bf16"}, {Isa::amx, "amx"},
                                 {Isa::neon, "neon"}};

// "one of auto, scalar, ...": what parse_isa and SDPA_ISA accept.
std::string isa_choices() {
  std::string s = "one of auto";
  for (const IsaName& e : kIsaNames)
    if (e.isa != Isa::automatic) s += std::string(", ") + e.name;
  return s;
}

// The number of kernel sets kernels.def lists: the table holds exactly these.
constexpr int kKernelSets = 0
#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc) +1
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
    ;

// Every compiled set's sizes; its kernels only where the CPU runs them. A
// set's fill function is compiled with its ISA's flags, and the compiler may
// use that ISA's instructions there too (storing the pointers with AVX-512
// moves, say), so calling it on a CPU without the ISA would fault.
struct Table {
  KernelSet sets[kKernelSets];
  int count = 0;
  Table() {
#define SDPA_KERNEL(isa_, name_, ns, w_, mr_, nv_, br_, bc_) \
  {                                                        \
    KernelSet& ks = sets[count++];                         \
    ks = KernelSet{};                                      \
    ks.isa = isa_;                                         \
    ks.name = #name_;                                      \
    ks.w = w_;                                             \
    ks.mr = mr_;                                           \
    ks.nr = (nv_) * (w_);                                  \
    ks.br = br_;                                           \
    ks.bc = bc_;                                           \
    if (::sdpa::isa_supported(isa_)) name_(ks);            \
  }
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
#if defined(__x86_64__)
    // vdpbf16ps: on Intel cores (measured: Emerald Rapids) it issues at half
    // the rate of vfmadd, so its 2 products per lane are no gain over float32
    // FMAs and the driver keeps to those; AMD's Zen 4 runs it at the FMA
    // rate, where the pairs double the products per instruction.
    for (int i = 0; i < count; ++i)
      if (sets[i].isa == Isa::avx512bf16) sets[i].bf16_fast = cpu_is_amd();
#endif
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

Isa detect_isa() {
  static const Isa best = [] {
    Isa b = Isa::scalar;
    for (Isa i : compiled_isas())
      if (isa_supported(i)) b = i;
    return b;
  }();
  return best;
}

Isa select_isa(Isa requested) {
  const char* who = "isa";
  if (requested == Isa::automatic) {
    const char* env = std::getenv("SDPA_ISA");
    if (!env || !*env || std::strcmp(env, "auto") == 0 || std::strcmp(env, "automatic") == 0) return detect_isa();
    try {
      requested = parse_isa(env);
    } catch (const Error&) {
      throw Error("SDPA_ISA", isa_choices(), std::string("'") + env + "'");
    }
    who = "SDPA_ISA";
    if (requested == Isa::automatic) return detect_isa();
  }
  if (!isa_supported(requested)) {
    std::string have;
    for (Isa i : compiled_isas())
      if (isa_supported(i)) have += std::string(have.empty() ? "" : ", ") + isa_name(i);
    throw Error(who, "an ISA this CPU supports (" + have + ")", isa_name(requested));
  }
  return requested;
}

const KernelSet& kernels_for(Isa isa) {
  const Table& t = table();
  for (int i = 0; i < t.count; ++i)
    if (t.sets[i].isa == isa) return t.sets[i];
  return t.sets[0];  // unreachable after select_isa(): scalar
}

}  // namespace cpu

const char* isa_name(Isa isa) {
  for (const cpu::IsaName& e : cpu::kIsaNames)
    if (e.isa == isa) return e.name;
  return "?";
}

Isa parse_isa(const std::string& name) {
  if (name == "auto") return Isa::automatic;
  for (const cpu::IsaName& e : cpu::kIsaNames)
    if (name == e.name) return e.isa;
  throw Error("isa", cpu::isa_choices(), "'" + name + "'");
}

std::vector<Isa> compiled_isas() {
  std::vector<Isa> out;
#define SDPA_KERNEL(isa_, name, ns, w, mr, nv, br, bc) out.push_back(isa_);
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
  return out;
}

bool isa_supported(Isa isa) {
  bool compiled = false;
  for (Isa i : compiled_isas()) compiled = compiled || i == isa;
  if (!compiled) return false;
  switch (isa) {
    case Isa::scalar: return true;
#if defined(__x86_64__)
    case Isa::avx2: {
      static const bool ok = cpu::cpu_has_avx2();
      return ok;
    }
    case Isa::avx512: {
      static const bool ok = cpu::cpu_has_avx512();
      return ok;
    }
    case Isa::avx512bf16: {
      static const bool ok = cpu::cpu_has_avx512bf16();
      return ok;
    }
    case Isa::amx: {
      static const bool ok = cpu::cpu_has_amx();
      return ok;
    }
#endif
    default: return false;
  }
}

Isa resolve_isa(Isa isa) { return cpu::select_isa(isa); }

}  // namespace sdpa
