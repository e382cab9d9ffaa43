#include <cstdio>
#include <vector>
#include "sdpa/attention.h"
int main() {
  std::vector<float> q(4, 1.f), k(4, 1.f), v(8, 1.f), o(7, 0.f);
  sdpa::TensorView O = sdpa::TensorView::contiguous(o.data(), {1, 2, 2, 2});
  O.stride = {8, 3, 2, 1};  // element (h=1,n=0,d=0) and (h=0,n=1,d=1) share offset 3
  try {
    sdpa::attention(sdpa::TensorView::contiguous(q.data(), {1, 2, 2, 1}), sdpa::TensorView::contiguous(k.data(), {1, 2, 2, 1}),
                    sdpa::TensorView::contiguous(v.data(), {1, 2, 2, 2}), O, {});
    std::puts("accepted an output whose elements overlap");
  } catch (const sdpa::Error& e) { std::printf("rejected: %s\n", e.what()); }
}
