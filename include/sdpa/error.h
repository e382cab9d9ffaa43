// sdpa::Error: the one exception type the library throws for a bad call.
//
// Every message names the argument, what was expected and what was given:
//   "k: expected heads Hkv dividing H=8, got 3"
#pragma once

#include <stdexcept>
#include <string>

#include "sdpa/export.h"

namespace sdpa {

class SDPA_API Error : public std::runtime_error {
 public:
  Error(std::string arg, std::string expected, std::string got)
      : std::runtime_error(arg + ": expected " + expected + ", got " + got),
        arg_(std::move(arg)),
        expected_(std::move(expected)),
        got_(std::move(got)) {}

  // A free-form failure that is not about one argument (for example an I/O error).
  explicit Error(const std::string& message) : std::runtime_error(message) {}

  const std::string& arg() const { return arg_; }
  const std::string& expected() const { return expected_; }
  const std::string& got() const { return got_; }

 private:
  std::string arg_, expected_, got_;
};

}  // namespace sdpa
