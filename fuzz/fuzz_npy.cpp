// The .npy parser on arbitrary bytes: parse_npy either returns an array whose
// data matches its shape and dtype, or throws sdpa::Error. A parsed array is
// re-encoded and re-parsed, and must come back identical.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sdpa;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  io::NpyArray a;
  try {
    a = io::parse_npy(bytes, "fuzz.npy");
  } catch (const Error&) {
    return 0;
  }
  if (a.shape.size() > static_cast<std::size_t>(io::kMaxNpyRank)) fuzz::fail("rank above kMaxNpyRank accepted");
  if (a.data.size() != static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype)) fuzz::fail("data size != numel");
  try {
    TensorView v = a.view();
    if (v.numel() != a.numel()) fuzz::fail("view numel != array numel");
  } catch (const Error&) {
    if (a.shape.size() <= 4) fuzz::fail("view() refused a rank <= 4 array");
  }
  const std::vector<std::byte> again = io::encode_npy(a.dtype, a.shape, a.data.data());
  const io::NpyArray b = io::parse_npy(again, "again.npy");
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data) fuzz::fail("encode/parse round trip differs");
  return 0;
}
