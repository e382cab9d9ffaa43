// The baseline attention most people write first, used as the reference point
// for our kernels' speed: per (batch, head) it materialises the full
// Nq x Nkv score matrix with one sgemm (scale folded into alpha), writes -inf
// over the causally masked scores, runs a three-pass row softmax (max,
// exp-and-sum, divide) and multiplies P by V with a second sgemm. The GEMMs
// run on OpenBLAS's own threads; the softmax is split over plain std::threads
// (joined before the second GEMM) only when a head has enough rows to pay
// for starting them. No OpenMP anywhere, so it cannot fight another runtime.
#include "support/blas_baseline.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

namespace sdpa::bench {

namespace {

// Fewest score elements per softmax thread for splitting to be worth it.
constexpr std::int64_t kMinSoftmaxWorkPerThread = std::int64_t{1} << 16;

// Rows [row_begin, row_end) of the n_q x n_kv score matrix s: causal mask,
// then softmax in place. A row with no visible key becomes all zeros.
void mask_and_softmax_rows(float* s, std::int64_t row_begin, std::int64_t row_end,
                           std::int64_t n_q, std::int64_t n_kv, bool causal) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    float* row = s + i * n_kv;
    if (causal) {
      // Keys j > i + n_kv - n_q are invisible; first_masked is clamped to [0, n_kv].
      const std::int64_t first_masked = std::clamp<std::int64_t>(i + n_kv - n_q + 1, 0, n_kv);
      std::fill(row + first_masked, row + n_kv, neg_inf);
    }
    float max = neg_inf;
    for (std::int64_t j = 0; j < n_kv; ++j) max = std::max(max, row[j]);
    if (max == neg_inf) {
      std::fill(row, row + n_kv, 0.0f);
      continue;
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j < n_kv; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    for (std::int64_t j = 0; j < n_kv; ++j) row[j] /= sum;
  }
}

void mask_and_softmax(float* s, std::int64_t n_q, std::int64_t n_kv, bool causal, int threads) {
  const std::int64_t useful = std::max<std::int64_t>(1, n_q * n_kv / kMinSoftmaxWorkPerThread);
  const int workers = static_cast<int>(std::min<std::int64_t>({threads, n_q, useful}));
  if (workers <= 1) {
    mask_and_softmax_rows(s, 0, n_q, n_q, n_kv, causal);
    return;
  }
  // Contiguous row ranges; with a causal mask the later rows hold more
  // visible keys, but every row is still fully swept, so equal counts balance.
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  auto range_begin = [&](int w) { return n_q * w / workers; };
  for (int w = 1; w < workers; ++w) {
    pool.emplace_back(mask_and_softmax_rows, s, range_begin(w), range_begin(w + 1), n_q, n_kv,
                      causal);
  }
  mask_and_softmax_rows(s, range_begin(0), range_begin(1), n_q, n_kv, causal);
  for (std::thread& th : pool) th.join();
}

}  // namespace

std::size_t blas_attention_scratch_bytes(std::int64_t n_q, std::int64_t n_kv) {
  return static_cast<std::size_t>(std::max<std::int64_t>(0, n_q)) *
         static_cast<std::size_t>(std::max<std::int64_t>(0, n_kv)) * sizeof(float);
}

void blas_attention(const float* q, const float* k, const float* v, float* o, std::int64_t b,
                    std::int64_t h, std::int64_t h_kv, std::int64_t n_q, std::int64_t n_kv,
                    std::int64_t d, std::int64_t dv, float scale, bool causal, int threads,
                    std::vector<float>& scratch) {
  constexpr std::int64_t blas_int_max = std::numeric_limits<int>::max();
  if (b < 0 || h < 1 || h_kv < 1 || n_q < 0 || n_kv < 0 || d < 0 || dv < 0) {
    throw std::invalid_argument("blas_attention: negative or zero-head shape");
  }
  if (h % h_kv != 0) {
    throw std::invalid_argument("blas_attention: h must be a multiple of h_kv");
  }
  if (n_q > blas_int_max || n_kv > blas_int_max || d > blas_int_max || dv > blas_int_max) {
    throw std::invalid_argument("blas_attention: dimension exceeds the BLAS integer range");
  }
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  if (b == 0 || n_q == 0 || dv == 0) return;
  const std::int64_t group = h / h_kv;
  if (n_kv == 0) {
    std::fill(o, o + b * h * n_q * dv, 0.0f);
    return;
  }

  const std::size_t s_elems = static_cast<std::size_t>(n_q) * static_cast<std::size_t>(n_kv);
  if (scratch.size() < s_elems) scratch.resize(s_elems);
  float* s = scratch.data();
  openblas_set_num_threads(threads);

  const int m = static_cast<int>(n_q);
  const int n = static_cast<int>(n_kv);
  const int kd = static_cast<int>(d);
  const int ldqk = static_cast<int>(std::max<std::int64_t>(1, d));
  const int ndv = static_cast<int>(dv);
  for (std::int64_t bi = 0; bi < b; ++bi) {
    for (std::int64_t hi = 0; hi < h; ++hi) {
      const std::int64_t hk = hi / group;
      const float* qh = q + (bi * h + hi) * n_q * d;
      const float* kh = k + (bi * h_kv + hk) * n_kv * d;
      const float* vh = v + (bi * h_kv + hk) * n_kv * dv;
      float* oh = o + (bi * h + hi) * n_q * dv;
      if (d == 0) {
        std::fill(s, s + s_elems, 0.0f);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kd, scale, qh, ldqk, kh, ldqk,
                    0.0f, s, n);
      }
      mask_and_softmax(s, n_q, n_kv, causal, threads);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, ndv, n, 1.0f, s, n, vh, ndv, 0.0f,
                  oh, ndv);
    }
  }
}

}  // namespace sdpa::bench
