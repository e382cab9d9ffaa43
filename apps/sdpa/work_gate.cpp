// WorkGate and the admission of the costly endpoints (see explorer_api.h, admission.h).
#include <algorithm>

#include "admission.h"

namespace sdpa::explorer {
namespace {

thread_local WorkGate* t_gate = nullptr;
thread_local std::optional<WorkGate::Turn>* t_turn = nullptr;

}  // namespace

void admit() {
  if (t_gate == nullptr || t_turn == nullptr || t_turn->has_value()) return;
  t_turn->emplace(t_gate->enter());
  if (!**t_turn) throw Busy{};
}

Admission::Admission(WorkGate* gate) : previous_gate_(t_gate), previous_turn_(t_turn) {
  t_gate = gate;
  t_turn = &turn_;
}

Admission::~Admission() {
  t_gate = previous_gate_;
  t_turn = previous_turn_;
}

WorkGate::WorkGate(int running, int waiting, std::chrono::milliseconds max_wait)
    : max_running_(std::max(running, 1)), max_waiting_(std::max(waiting, 0)), max_wait_(max_wait) {}

WorkGate::Turn WorkGate::enter() {
  std::unique_lock lock(mutex_);
  if (running_ < max_running_ && waiting_ == 0) {
    ++running_;
    return Turn(this);
  }
  if (waiting_ >= max_waiting_) return Turn();
  ++waiting_;
  const bool got = turn_free_.wait_for(lock, max_wait_, [&] { return running_ < max_running_; });
  --waiting_;
  if (!got) return Turn();
  ++running_;
  return Turn(this);
}

int WorkGate::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

int WorkGate::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

WorkGate::Turn::~Turn() {
  if (!gate_) return;
  {
    std::lock_guard lock(gate_->mutex_);
    --gate_->running_;
  }
  gate_->turn_free_.notify_one();
}

}  // namespace sdpa::explorer
