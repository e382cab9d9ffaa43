// Admission of the costly endpoints through handle()'s WorkGate.
//
// A costly endpoint calls admit() once its request is validated (so a bad
// request is still a 400 when the server is busy) and before its work: under
// handle()'s gate it then waits for a turn, held until handle() returns, or
// throws Busy (503). Without a gate admit() does nothing.
#pragma once

#include <optional>

#include "explorer_api.h"

namespace sdpa::explorer {

struct Busy {};

void admit();

// Makes `gate` the one admit() uses during one handle() call (this thread).
class Admission {
 public:
  explicit Admission(WorkGate* gate);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission();

 private:
  std::optional<WorkGate::Turn> turn_;
  WorkGate* previous_gate_;
  std::optional<WorkGate::Turn>* previous_turn_;
};

}  // namespace sdpa::explorer
