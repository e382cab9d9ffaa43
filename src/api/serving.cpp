// Packed batches, KV cache and paged KV: each call is described as a Call,
// checked and turned into Params by make_params (src/api/validate.cpp), the
// new keys/values appended once everything has been accepted, then run.
#include "sdpa/serving.h"

#include <new>
#include <string>

#include "cpu/driver.h"
#include "params.h"
#include "reference/attention_ref.h"
#include "sdpa/error.h"

namespace sdpa {
namespace {

void run(const Call& c) {
  const Params p = make_params(c);
  append_kv(p, c);
  if (c.path == Path::reference) {
    try {
      reference::run(p);
    } catch (const std::bad_alloc&) {
      // The oracle's rows of Nkv scores and dv sums.
      throw Error("o", "a call whose working memory (Nkv + dv doubles) can be allocated",
                  "Nkv=" + std::to_string(p.n_kv) + ", dv=" + std::to_string(p.dv) + ": out of memory");
    }
  } else {
    cpu::run(p);  // reports its own working memory
  }
}

Path path_of(bool reference) { return reference ? Path::reference : Path::fast; }

}  // namespace

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                      const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k, const Options& opt,
                      std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, bool reference) {
  Call c{.q = q, .k = k, .v = v, .o = o, .opt = &opt, .path = path_of(reference), .storage = KvStorage::packed};
  c.cu_seqlens_q = cu_seqlens_q;
  c.cu_seqlens_k = cu_seqlens_k;
  c.max_seqlen_q = max_seqlen_q;
  c.max_seqlen_k = max_seqlen_k;
  run(c);
}

void attention_kvcache(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                       const TensorView& cache_seqlens, const TensorView& k_new, const TensorView& v_new,
                       const TensorView& o, const Options& opt, bool reference) {
  Call c{.q = q, .k = k_cache, .v = v_cache, .o = o, .opt = &opt, .path = path_of(reference), .storage = KvStorage::cache};
  c.cache_seqlens = cache_seqlens;
  c.k_new = k_new;
  c.v_new = v_new;
  run(c);
}

void attention_paged(const TensorView& q, const TensorView& k_pages, const TensorView& v_pages,
                     const TensorView& block_table, const TensorView& cache_seqlens, const TensorView& k_new,
                     const TensorView& v_new, const TensorView& o, const Options& opt, bool reference) {
  Call c{.q = q, .k = k_pages, .v = v_pages, .o = o, .opt = &opt, .path = path_of(reference), .storage = KvStorage::paged};
  c.cache_seqlens = cache_seqlens;
  c.k_new = k_new;
  c.v_new = v_new;
  c.block_table = block_table;
  run(c);
}

}  // namespace sdpa
