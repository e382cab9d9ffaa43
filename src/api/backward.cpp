// The backward entry points: validate once (make_params with Call::backward),
// then run the fast path or the oracle.
#include "sdpa/backward.h"

#include <cmath>
#include <new>
#include <string>

#include "cpu/driver.h"
#include "params.h"
#include "reference/attention_ref.h"
#include "sdpa/error.h"

namespace sdpa {
namespace {

void run_reference(const Params& p) {
  try {
    reference::backward(p);
  } catch (const std::bad_alloc&) {
    // The oracle's dK and dV accumulators: B*Hkv*Nkv*(d + dv) doubles.
    throw Error("dq", "a call whose working memory (B*Hkv*Nkv*(d + dv) doubles) can be allocated",
                "Nkv=" + std::to_string(p.n_kv) + ", d=" + std::to_string(p.d) + ", dv=" + std::to_string(p.dv) +
                    ": out of memory");
  }
}

void run(const Call& c) {
  const Params p = make_params(c);
  if (c.path == Path::reference) {
    run_reference(p);
    return;
  }
  // A gradient that is not finite in float32 (an overflow from finite inputs,
  // or Inf/NaN in the data) is recomputed by the float64 path, which gives
  // the exact gradient where float32 overflowed and the oracle's NaN and Inf
  // where the data has them.
  if (!cpu::backward(p)) run_reference(p);
}

Call backward_call(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const TensorView& lse, const TensorView& d_o, const Gradients& g, const Options& opt, Path path) {
  Call c{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = path};
  c.backward = true;
  c.lse = lse;
  c.d_o = d_o;
  c.dq = g.dq;
  c.dk = g.dk;
  c.dv = g.dv;
  c.dsinks = g.dsinks;
  return c;
}

}  // namespace

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                        const TensorView& lse, const TensorView& d_o, const Gradients& grads, const Options& opt) {
  run(backward_call(q, k, v, o, lse, d_o, grads, opt, Path::fast));
}

void reference_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                  const TensorView& lse, const TensorView& d_o, const Gradients& grads,
                                  const Options& opt) {
  run(backward_call(q, k, v, o, lse, d_o, grads, opt, Path::reference));
}

void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                               const TensorView& lse, const TensorView& d_o, const Gradients& grads,
                               const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k, const Options& opt,
                               std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, bool reference) {
  Call c = backward_call(q, k, v, o, lse, d_o, grads, opt, reference ? Path::reference : Path::fast);
  c.storage = KvStorage::packed;
  c.cu_seqlens_q = cu_seqlens_q;
  c.cu_seqlens_k = cu_seqlens_k;
  c.max_seqlen_q = max_seqlen_q;
  c.max_seqlen_k = max_seqlen_k;
  run(c);
}

}  // namespace sdpa
