#include "output_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "commands.h"
#include "io/npy.h"

namespace sdpa::cli {

namespace fs = std::filesystem;

void check_destination(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw std::runtime_error(fmt::format("{} {}: cannot write: it is a directory", flag, path));
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(fmt::format("{} {}: cannot write: no directory {}", flag, path, dir.string()));
}

CLI::Validator file_name() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("expected a file name, got an empty string") : std::string(); },
      "");
}

namespace {

// What a path names, for telling whether two paths are one file.
struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  fs::path normal;  // absolute, lexically normalised

  explicit Identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {  // follows links
      exists = true;
      dev = st.st_dev;
      ino = st.st_ino;
    }
    std::error_code ec;
    normal = fs::absolute(path, ec).lexically_normal();
    if (ec) normal = fs::path(path).lexically_normal();
  }
  bool same(const Identity& o) const {
    if (exists && o.exists) return dev == o.dev && ino == o.ino;
    return normal == o.normal;
  }
};

}  // namespace

void check_distinct(const FlagPaths& outputs, const FlagPaths& inputs) {
  std::vector<std::pair<const std::pair<std::string, std::string>*, Identity>> ins, outs;
  for (const auto& in : inputs)
    if (!in.second.empty()) ins.emplace_back(&in, Identity(in.second));
  for (const auto& out : outputs) {
    if (out.second.empty()) continue;
    Identity id(out.second);
    for (const auto& [in, in_id] : ins)
      if (id.same(in_id))
        throw UsageError(fmt::format("{} {}: expected a file other than the inputs, got the file of {} {}", out.first,
                                     out.second, in->first, in->second));
    for (const auto& [other, other_id] : outs)
      if (id.same(other_id))
        throw UsageError(fmt::format("{} and {} name the same file {}", other->first, out.first, out.second));
    outs.emplace_back(&out, std::move(id));
  }
}

StagedOutputs::~StagedOutputs() {
  for (const Entry& e : entries_)
    if (!e.committed && !e.stage.empty()) ::unlink(e.stage.c_str());
}

void StagedOutputs::stage(const std::string& flag, const std::string& path, DType dtype,
                          std::span<const std::int64_t> shape, const void* data) {
  Entry e;
  e.path = path;
  e.stage = reserve_stage(flag, path);
  entries_.push_back(e);
  try {
    io::write_npy(e.stage, dtype, shape, data);
  } catch (const std::exception& ex) {
    // write_npy names the stage file; report the destination instead.
    throw std::runtime_error(fmt::format("{} {}: cannot write: {}", flag, path, ex.what()));
  }
}

void StagedOutputs::commit() {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    struct stat st {};
    const bool existed = ::stat(e.path.c_str(), &st) == 0;
    // Replacing a file keeps its permissions, as write_npy does.
    if (existed && S_ISREG(st.st_mode)) ::chmod(e.stage.c_str(), st.st_mode & 07777);
    if (::rename(e.stage.c_str(), e.path.c_str()) != 0) {
      const int err = errno;
      for (std::size_t j = 0; j < i; ++j)
        if (!entries_[j].existed) ::unlink(entries_[j].path.c_str());
      throw std::runtime_error(fmt::format("{}: cannot write: rename from {}: {}", e.path, e.stage, std::strerror(err)));
    }
    e.existed = existed;
    e.committed = true;
  }
}

// Creates the stage file exclusively, so that no other file is ever
// overwritten or removed by the cleanup.
std::string StagedOutputs::reserve_stage(const std::string& flag, const std::string& path) const {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::mt19937_64 rng(std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string stage = path + ".tmp." + tag_ + ".";
    for (int i = 0; i < 6; ++i) stage += kChars[rng() % (sizeof(kChars) - 1)];
    const int fd = ::open(stage.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      return stage;
    }
    if (errno != EEXIST) break;
  }
  throw std::runtime_error(
      fmt::format("{} {}: cannot write: cannot create a file next to it: {}", flag, path, std::strerror(errno)));
}

}  // namespace sdpa::cli
