// The library's one thread pool.
#pragma once

#include <cstdint>
#include <functional>

namespace sdpa::cpu {

// Calls fn(item, worker) for every item in [0, n) on up to `threads` threads
// (the caller is worker 0; worker < threads). Items are handed out in
// increasing order from a shared counter, so uneven items balance themselves;
// which worker runs an item never changes what the item computes.
//
// One process-wide pool of workers serves every call; between calls they
// poll briefly (threads.cpp), then sleep. When another
// call already holds the pool (calls from several user threads), this call
// runs its items on the calling thread: still correct and deterministic.
// If fn throws, no further item is started, and the first exception thrown
// is rethrown on the calling thread once every worker has stopped.
void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t item, int worker)>& fn);

}  // namespace sdpa::cpu
