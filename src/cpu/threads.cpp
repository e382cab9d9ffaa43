// A small pool of workers that sleep on a condition variable between calls
// (no spinning: on a 2-core machine, spinning workers starve whoever runs
// next, e.g. a BLAS with threads of its own). A call publishes a job, wakes
// the workers it needs, works on the job itself, and waits until every worker
// it woke has finished.
#include "cpu/threads.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sdpa::cpu {
namespace {

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
    pending_ = job.helpers;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    drain(job, 0);
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

  std::mutex& call_mutex() { return call_mu_; }

 private:
  void loop(int id) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      Job* job = job_;
      if (!job || id > job->helpers) continue;
      lock.unlock();
      drain(*job, id);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex call_mu_;  // one call uses the pool at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
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
