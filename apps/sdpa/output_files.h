// Writing a command's output files all or nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "sdpa/tensor_view.h"

namespace sdpa::cli {

// Fails early, before anything is read or computed, on a destination that
// cannot work (a directory, or a folder that does not exist). `flag` names it
// in the message ("--out o.npy: cannot write: ...").
void check_destination(const std::string& flag, const std::string& path);

// A CLI11 check for a flag that takes a file name: an empty one is a usage
// error ("--out: expected a file name, got an empty string"), so that an
// empty path below always means "not asked for".
CLI::Validator file_name();

// (flag, path) pairs; an empty path is a flag not given.
using FlagPaths = std::vector<std::pair<std::string, std::string>>;

// Two outputs on one file would silently overwrite each other, and an output
// on an input would replace it: usage errors, before anything is read. Files
// are compared by identity (device and inode, following links), so a second
// spelling, a symbolic or a hard link is the same file; outputs that do not
// exist yet are compared by their normalised absolute paths.
void check_distinct(const FlagPaths& outputs, const FlagPaths& inputs = {});

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
