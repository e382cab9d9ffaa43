// Running the `sdpa` binary (SDPA_CLI) from a test: one fresh folder per test,
// the command's exit code, stdout and stderr, and what it leaves behind.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace sdpa::test {

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh folder per test (named after the test), removed afterwards; cli()
// runs the binary with stdin closed and its output captured.
class CliFixture : public ::testing::Test {
 protected:
  explicit CliFixture(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    namespace fs = std::filesystem;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
    dir_ = fs::temp_directory_path() / (prefix_ + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    capture_ = dir_ / "capture";
    fs::create_directories(capture_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  Result cli(const std::vector<std::string>& args) const {
    std::string cmd = shell_quote(SDPA_CLI);
    // Appended piecewise: `" " + std::string` trips a false -Wrestrict in GCC 12.
    for (const std::string& a : args) {
      cmd += ' ';
      cmd += shell_quote(a);
    }
    const std::filesystem::path out = capture_ / "stdout", err = capture_ / "stderr";
    cmd += " >";
    cmd += shell_quote(out.string());
    cmd += " 2>";
    cmd += shell_quote(err.string());
    cmd += " </dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Names in the test folder containing ".tmp": leftovers of an unfinished write.
  std::vector<std::string> tmp_leftovers() const {
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp") != std::string::npos) found.push_back(name);
    }
    return found;
  }

  std::string prefix_;
  std::filesystem::path dir_, capture_;
};

}  // namespace sdpa::test
