// TileOps: what the forward (driver.cpp) and the backward (backward.cpp)
// share about one block of rows and one tile of keys: which query and head a
// row is, the keys each row sees, the explicit mask and ALiBi on a score row,
// and row pointers into K and V.
//
// Rows. For each batch b and K/V head hk, the H/Hkv query heads that read hk
// form one row space r = i*group + g (query i, head hk*group + g); a block is
// nr consecutive rows from r0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/kernels/kernel_set.h"
#include "half.h"
#include "params.h"

namespace sdpa::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Rows {
  std::int64_t b, hk, r0;
  int nr;
};

// The keys a block's rows see before explicit masks: their union [lo, hi) and
// the part [full_lo, full_hi) every row sees (empty when full_lo >= full_hi).
struct BlockRange {
  std::int64_t lo, hi, full_lo, full_hi;
};

class TileOps {
 public:
  TileOps(const Params& p, const KernelSet& ks) : p_(p), ks_(ks) {}

  std::int64_t query(const Rows& bl, int rr) const { return (bl.r0 + rr) / p_.group; }
  std::int64_t head(const Rows& bl, int rr) const { return bl.hk * p_.group + (bl.r0 + rr) % p_.group; }

  BlockRange block_range(const Rows& bl) const {
    BlockRange r{std::numeric_limits<std::int64_t>::max(), 0, 0, std::numeric_limits<std::int64_t>::max()};
    // Rows of one query share a range: visit each query once.
    for (std::int64_t i = query(bl, 0); i <= query(bl, bl.nr - 1); ++i) {
      const Params::Range v = p_.visible(bl.b, i);
      if (v.lo < v.hi) {
        r.lo = std::min(r.lo, v.lo);
        r.hi = std::max(r.hi, v.hi);
      }
      r.full_lo = std::max(r.full_lo, v.lo);
      r.full_hi = std::min(r.full_hi, v.hi);
    }
    if (r.lo > r.hi) r.lo = r.hi = 0;  // no row sees anything
    return r;
  }

  // Explicit mask and ALiBi on one row of a tile, keys [t0, t0 + n).
  void modify_row(const Rows& bl, int rr, std::int64_t t0, int n, float* row) const {
    const std::int64_t i = query(bl, rr), h = head(bl, rr);
    if (p_.alibi.data) {
      const float slope = static_cast<const float*>(p_.alibi.data)[bl.b * p_.alibi.stride_b + h * p_.alibi.stride_h];
      const float pos = static_cast<float>(p_.position(bl.b, i) - t0);  // 128-bit: any offset
      for (int j = 0; j < n; ++j) row[j] -= slope * std::fabs(pos - static_cast<float>(j));
    }
    if (p_.mask.data) {
      const Broadcast& mk = p_.mask;
      const std::int64_t base = bl.b * mk.stride_b + h * mk.stride_h + i * mk.stride_i + t0 * mk.stride_j;
      const std::int64_t sj = mk.stride_j;
      if (mk.dtype == DType::boolean) {
        const bool* m = static_cast<const bool*>(mk.data) + base;
        for (int j = 0; j < n; ++j)
          if (!m[j * sj]) row[j] = kNegInf;
      } else if (mk.dtype == DType::f16) {
        const std::uint16_t* m = static_cast<const std::uint16_t*>(mk.data) + base;
        for (int j = 0; j < n; ++j) {
          const float a = half_to_float(m[j * sj]);
          row[j] = a == kNegInf ? kNegInf : row[j] + a;
        }
      } else {
        const float* m = static_cast<const float*>(mk.data) + base;
        for (int j = 0; j < n; ++j) row[j] = m[j * sj] == kNegInf ? kNegInf : row[j] + m[j * sj];
      }
    }
  }

  // Whether key t0 + j is visible to row rr (ranges and explicit mask): used
  // only on the rare path that adds non-finite values by hand.
  bool visible(const Rows& bl, int rr, std::int64_t key) const {
    const Params::Range v = p_.visible(bl.b, query(bl, rr));
    if (key < v.lo || key >= v.hi) return false;
    if (!p_.mask.data) return true;
    const Broadcast& mk = p_.mask;
    const std::int64_t at =
        bl.b * mk.stride_b + head(bl, rr) * mk.stride_h + query(bl, rr) * mk.stride_i + key * mk.stride_j;
    if (mk.dtype == DType::boolean) return static_cast<const bool*>(mk.data)[at];
    if (mk.dtype == DType::f16) return half_to_float(static_cast<const std::uint16_t*>(mk.data)[at]) != kNegInf;
    return static_cast<const float*>(mk.data)[at] != kNegInf;
  }

  // Row pointers of keys [t0, t0 + n) of K or V (contiguous, packed or
  // paged; t is p.k or p.v) as float32: in place when stored in float32,
  // else converted into this thread's buffer for t, in rows of width rounded
  // up to 16 floats, zero padded (so they also serve as padded V rows).
  void kv_rows(const Operand& t, const Rows& bl, std::int64_t t0, int n, const float** out) const {
    if (t.dtype != DType::f32) {
      const int width = static_cast<int>(p_.row_width(t));
      const std::int64_t stride = (width + 15) / 16 * 16;
      float* buf = convert_buffer(&t == &p_.k ? 0 : 1, static_cast<std::size_t>(n * stride));
      const Operand* sc = p_.scales_of(t);
      p_.for_each_kv_run(t, bl.b, bl.hk, t0, n, [&](std::int64_t i, std::int64_t count, const char* first, std::int64_t step) {
        for (std::int64_t j = i; j < i + count; ++j) {
          float* dst = buf + j * stride;
          if (sc)
            convert_row(t, bl.b, bl.hk, t0 + j, width, dst);
          else
            ks_.to_f32(first + (j - i) * step, t.dtype, width, dst);
          for (std::int64_t c = width; c < stride; ++c) dst[c] = 0.0f;
          out[j] = dst;
        }
      });
      return;
    }
    p_.for_each_kv_run(t, bl.b, bl.hk, t0, n, [&](std::int64_t i, std::int64_t count, const char* first, std::int64_t step) {
      for (std::int64_t j = 0; j < count; ++j) out[i + j] = reinterpret_cast<const float*>(first + j * step);
    });
  }

  // Key row j of K or V (t is p.k or p.v) as `width` floats into dst.
  void convert_row(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j, int width, float* dst) const {
    const void* src = p_.kv_addr(t, b, hk, j);
    if (t.dtype == DType::f32) {
      std::memcpy(dst, src, static_cast<std::size_t>(width) * sizeof(float));
    } else if (const Operand* sc = p_.scales_of(t)) {
      ks_.dequant_i8(static_cast<const std::int8_t*>(src), p_.kv_addr(*sc, b, hk, j), sc->dtype,
                     static_cast<int>(p_.group_of(t)), width, dst);
    } else {
      ks_.to_f32(src, t.dtype, width, dst);
    }
  }

  // Key row j of K or V as floats: in place for float32, else converted into
  // tmp (at least the row's width).
  const float* kv_row_f32(const Operand& t, std::int64_t b, std::int64_t hk, std::int64_t j, float* tmp) const {
    if (t.dtype == DType::f32) return p_.kv_row<const float>(t, b, hk, j);
    convert_row(t, b, hk, j, static_cast<int>(p_.row_width(t)), tmp);
    return tmp;
  }

  // Row n of a Q-like operand (Q, O, dO: float32, float16 or bfloat16) as
  // `width` floats into dst.
  void load_row(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t width, float* dst) const {
    const void* src = t.addr(b, h, n);
    if (t.dtype == DType::f32)
      std::memcpy(dst, src, static_cast<std::size_t>(width) * sizeof(float));
    else
      ks_.to_f32(src, t.dtype, static_cast<int>(width), dst);
  }

  // load_row times scale: a query row with the scale folded in (float32 rows
  // in one vectorised pass, the same bits as converting then multiplying).
  void load_scaled_row(const Operand& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t width,
                       float scale, float* dst) const {
    if (t.dtype == DType::f32) {
      ks_.scale_copy(static_cast<const float*>(t.addr(b, h, n)), width, scale, dst);
      return;
    }
    load_row(t, b, h, n, width, dst);
    for (std::int64_t c = 0; c < width; ++c) dst[c] *= scale;
  }

  // Writes `width` floats as row n of an output (O, dQ, dK, dV) in its dtype.
  static void store_row(const Operand& t, void* row, std::int64_t width, const float* src) {
    if (t.dtype == DType::f32) {
      std::memcpy(row, src, static_cast<std::size_t>(width) * sizeof(float));
      return;
    }
    for (std::int64_t c = 0; c < width; ++c) store_float(row, t.dtype, c, src[c]);
  }

  // Whether the rows of a block see different keys of tile [t0, t0 + n).
  static bool ranged_tile(std::int64_t t0, int n, const BlockRange& br) { return t0 < br.full_lo || t0 + n > br.full_hi; }
  // Each row's keys within tile [t0, t0 + n) before explicit masks:
  // [row_begin[rr], row_end[rr]), empty when row_end = row_begin.
  void tile_ranges(const Rows& bl, std::int64_t t0, int n, int* row_begin, int* row_end) const {
    for (int rr = 0; rr < bl.nr; ++rr) {
      const Params::Range v = p_.visible(bl.b, query(bl, rr));
      const int b = static_cast<int>(std::clamp<std::int64_t>(v.lo - t0, 0, n));
      const int e = static_cast<int>(std::clamp<std::int64_t>(v.hi - t0, 0, n));
      row_begin[rr] = b;
      row_end[rr] = e < b ? b : e;
    }
  }

  // Masks one score tile (keys [t0, t0 + n), rows of `bl`, padded to bc_pad
  // columns): entries outside a row's range, those the explicit mask disables
  // and the padding become -inf; the float mask and ALiBi are added. Returns
  // whether rows see different key ranges in this tile (then row_begin and
  // row_end hold each row's [begin, end) within the tile; ranges_set: they
  // hold them already, from tile_ranges).
  //
  // span_begin and span_end (a ranged tile without an explicit mask or ALiBi)
  // limit each row to columns [span_begin[rr], span_end[rr]), which hold its
  // range: only those are set, the rest are never read after.
  bool mask_tile(const Rows& bl, std::int64_t t0, int n, int bc_pad, float* s, int* row_begin, int* row_end,
                 const BlockRange& br, bool ranges_set = false, const int* span_begin = nullptr,
                 const int* span_end = nullptr) const {
    const bool ranged = ranged_tile(t0, n, br);
    const bool modify = p_.mask.data || p_.alibi.data;
    if (!ranged && !modify && n == bc_pad) return false;  // every row sees every key: nothing to set
    if (ranged && !ranges_set) tile_ranges(bl, t0, n, row_begin, row_end);
    for (int rr = 0; rr < bl.nr; ++rr) {
      float* row = s + static_cast<std::int64_t>(rr) * bc_pad;
      const int b = ranged ? row_begin[rr] : 0, e = ranged ? row_end[rr] : n;
      if (modify) modify_row(bl, rr, t0, n, row);
      const int lo = span_begin ? span_begin[rr] : 0, hi = span_end ? span_end[rr] : bc_pad;
      for (int j = lo; j < b; ++j) row[j] = kNegInf;
      for (int j = e > lo ? e : lo; j < hi; ++j) row[j] = kNegInf;
    }
    return ranged;
  }

 protected:
  // Per-thread float32 rows converted from 16-bit or int8 K (which = 0) and V (1).
  static float* convert_buffer(int which, std::size_t n) {
    thread_local std::vector<float> bufs[2];
    if (bufs[which].size() < n) bufs[which].resize(n);
    return bufs[which].data();
  }

  const Params& p_;
  const KernelSet& ks_;
};

}  // namespace sdpa::cpu
