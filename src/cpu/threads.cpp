// A small pool of workers that sleep on a condition variable between calls.
// A call publishes a job, wakes the workers it needs, works on the job
// itself, and waits until every worker it woke has finished.
//
// Waking a sleeping thread is slow where the cores are virtual: measured on a
// 2-vCPU KVM guest (Intel Xeon), a worker started its first item 95 us after
// the call began (median; 0.9 ms at the 90th percentile), most of a decode
// call at Nkv = 1024. So a worker that finishes a job, and a caller that
// waits for its workers, first poll for kSpin (far under the 300,000 polls
// GNU OpenMP's workers make by default, and long enough for the next call of
// a loop of calls to find them awake), and only then sleep. Measured
// alternated in one process, 2 threads: decode H = 32, d = 128, Nkv = 1024
// 1.06 -> 0.90 ms (Hkv = 32) and 0.45 -> 0.31 ms (Hkv = 8); prefill N = 256,
// H = 16, d = 128 159 -> 168 GFLOP/s; 200 us and 1 ms polls gained no more.
// Polling is bounded so that idle workers keep a core from whoever runs next
// (a BLAS with threads of its own, say) for at most kSpin.
#include "cpu/threads.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sdpa::cpu {
namespace {

constexpr std::chrono::microseconds kSpin{50};
// A caller waits only while a worker it woke still runs an item (its own work
// is done), so it polls longer: a prefill call's last items take ~0.3 ms at
// N = 512, d = 128, and a caller asleep by then is woken ~0.1 ms late.
constexpr std::chrono::microseconds kCallerSpin{1000};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() for up to `spin`; whether it came true.
template <class F>
bool spin_until(F done, std::chrono::microseconds spin = kSpin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  do {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      relax();
    }
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

struct Job {
  const std::function<void(std::int64_t, int)>* fn = nullptr;
  std::int64_t n = 0;
  std::atomic<std::int64_t> next{0};
  int helpers = 0;  // workers 1..helpers take part
  std::mutex error_mu;
  std::exception_ptr error;  // the first exception an item threw
};

void drain(Job& job, int worker) {
  try {
    for (std::int64_t i; (i = job.next.fetch_add(1, std::memory_order_relaxed)) < job.n;) (*job.fn)(i, worker);
  } catch (...) {
    // Stop handing out items; the caller rethrows once everyone has stopped.
    job.next.store(job.n, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(job.error_mu);
    if (!job.error) job.error = std::current_exception();
  }
}

class Pool {
 public:
  // Runs the job on the calling thread plus `helpers` pool workers.
  void run(Job& job) {
    std::unique_lock<std::mutex> lock(mu_);
    while (static_cast<int>(workers_.size()) < job.helpers) {
      const int id = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, id] { loop(id); });
    }
    job_ = &job;
    pending_.store(job.helpers, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
    drain(job, 0);
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, kCallerSpin);
    lock.lock();
    done_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
    job_ = nullptr;
  }

  std::mutex& call_mutex() { return call_mu_; }

 private:
  void loop(int id) {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      seen = generation_.load(std::memory_order_relaxed);
      Job* job = job_;
      if (!job || id > job->helpers) continue;
      lock.unlock();
      drain(*job, id);
      lock.lock();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_one();
    }
  }

  std::mutex call_mu_;  // one call uses the pool at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<std::uint64_t> generation_{0};
};

Pool& pool() {
  // Never destroyed: workers sleep until the process exits, so no call can
  // race with static destruction.
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t, int)>& fn) {
  if (n <= 0) return;
  Job job;
  job.fn = &fn;
  job.n = n;
  const std::int64_t useful = n < threads ? n : threads;
  job.helpers = static_cast<int>(useful) - 1;
  Pool& p = pool();
  std::unique_lock<std::mutex> busy;
  if (job.helpers > 0) busy = std::unique_lock<std::mutex>(p.call_mutex(), std::try_to_lock);
  if (busy.owns_lock()) {
    p.run(job);
  } else {
    drain(job, 0);
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace sdpa::cpu
