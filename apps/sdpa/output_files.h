// Writing a command's output files all or nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sdpa/tensor_view.h"

namespace sdpa::cli {

// Fails early, before anything is read or computed, on a destination that
// cannot work (a directory, or a folder that does not exist). `flag` names it
// in the message ("--out o.npy: cannot write: ...").
void check_destination(const std::string& flag, const std::string& path);

// Two outputs on one path would silently overwrite each other: a usage error.
// `outputs` holds (flag, path) pairs; an empty path is an output not asked for.
void check_distinct(const std::vector<std::pair<std::string, std::string>>& outputs);

// Each output is first written (with write_npy, atomically) to a stage file
// next to its destination (path + ".tmp.<tag>.XXXXXX"); only when every stage
// succeeded does commit() rename them into place. Until then the destructor
// removes every stage, so a failure leaves destinations untouched. If a rename
// itself fails halfway, the files this run created are removed again (a file
// replaced a moment before cannot be brought back).
class StagedOutputs {
 public:
  explicit StagedOutputs(std::string tag) : tag_(std::move(tag)) {}
  StagedOutputs(const StagedOutputs&) = delete;
  StagedOutputs& operator=(const StagedOutputs&) = delete;
  ~StagedOutputs();

  void stage(const std::string& flag, const std::string& path, DType dtype, std::span<const std::int64_t> shape,
             const void* data);
  void commit();

 private:
  struct Entry {
    std::string path, stage;
    bool existed = false, committed = false;
  };
  std::string reserve_stage(const std::string& flag, const std::string& path) const;

  std::string tag_;
  std::vector<Entry> entries_;
};

}  // namespace sdpa::cli
