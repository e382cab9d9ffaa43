// The command line: the real app (build_app(), as main() builds it, every
// subcommand and flag) parses an argv made of the input's NUL-separated
// pieces. A parse either succeeds or throws CLI::ParseError, whose message (or
// help or version text) is then formatted as main() would print it.
//
// After a successful parse of `sdpa run` its action runs too (the others are
// only parsed: they serve, benchmark or print), inside a scratch directory
// that holds a fixed set of small .npy files (kFiles: Q, K, V, dO, masks,
// slopes, sinks, packed rows and prefix sums, a file that is not .npy), so the
// forward, the backward, dropout and the packed path run on whatever flags
// the input combines. Only argvs without a '/' run, so every path names a
// file in that directory (the working directory while the action runs). The action either succeeds or throws (as main()
// reports it); a failing run leaves no file of its own behind and the files
// it was given unchanged. After each run the directory is put back as it was.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"
#include "io/npy.h"

namespace {

namespace fs = std::filesystem;

struct File {
  std::string name;
  std::vector<char> bytes;
};

std::vector<File>& files() {
  static std::vector<File> f;
  return f;
}

std::string& scratch() {
  static std::string s;
  return s;
}

std::string& original_dir() {
  static std::string s;
  return s;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Deterministic small values; every seventh of a float mask -inf.
template <class T>
std::vector<T> values(std::size_t n, int salt, bool with_neg_inf = false) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int x = static_cast<int>((i * 37 + static_cast<std::size_t>(salt) * 11) % 17) - 8;
    v[i] = static_cast<T>(x / 4.0);
    if (with_neg_inf && i % 7 == 3) v[i] = -std::numeric_limits<T>::infinity();
  }
  return v;
}

template <class T>
void add_npy(const char* name, sdpa::DType dtype, std::vector<std::int64_t> shape, const std::vector<T>& data) {
  sdpa::io::write_npy(name, dtype, shape, data.data());
  files().push_back({name, read_bytes(name)});
}

std::size_t count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::int64_t x : shape) n *= static_cast<std::size_t>(x);
  return n;
}

// The fixed file set (names also in fuzz_cli.dict). Dense: B=1, H=2, Hkv=1,
// Nq=3, Nkv=5, d=4, dv=2; packed: two sequences of 1 and 2 queries, 2 and 3 keys.
void make_files() {
  using sdpa::DType;
  int salt = 0;
  auto f32 = [&](const char* name, std::vector<std::int64_t> shape, bool neg_inf = false) {
    add_npy(name, DType::f32, shape, values<float>(count(shape), ++salt, neg_inf));
  };
  f32("q.npy", {1, 2, 3, 4});
  f32("k.npy", {1, 1, 5, 4});
  f32("v.npy", {1, 1, 5, 2});
  f32("do.npy", {1, 2, 3, 2});
  f32("q3.npy", {2, 3, 4});
  f32("k3.npy", {1, 5, 4});
  f32("v3.npy", {1, 5, 2});
  f32("do3.npy", {2, 3, 2});
  f32("qs.npy", {1, 3, 2, 4});  // bshd: [B, N, H, d]
  f32("ks.npy", {1, 5, 1, 4});
  f32("vs.npy", {1, 5, 1, 2});
  f32("dos.npy", {1, 3, 2, 2});
  add_npy("q64.npy", DType::f64, {1, 2, 3, 4}, values<double>(24, ++salt));
  add_npy("do64.npy", DType::f64, {1, 2, 3, 2}, values<double>(12, ++salt));
  std::vector<bool> m(15);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = i % 4 != 1;
  std::vector<std::uint8_t> mb(m.begin(), m.end());
  add_npy("mask.npy", DType::boolean, {3, 5}, mb);
  f32("fmask.npy", {1, 2, 3, 5}, true);
  f32("alibi.npy", {2});
  f32("alibi2.npy", {1, 2});
  f32("sinks.npy", {2});
  add_npy("cuq.npy", DType::i32, {3}, std::vector<std::int32_t>{0, 1, 3});
  add_npy("cuk.npy", DType::i64, {3}, std::vector<std::int64_t>{0, 2, 5});
  f32("qp.npy", {3, 2, 4});
  f32("kp.npy", {5, 1, 4});
  f32("vp.npy", {5, 1, 2});
  f32("dop.npy", {3, 2, 2});
  f32("empty.npy", {1, 2, 0, 4});
  const char junk[] = "not a .npy file";
  write_bytes("junk.npy", std::vector<char>(junk, junk + sizeof junk - 1));
  files().push_back({"junk.npy", read_bytes("junk.npy")});
}

// Paths as pieces of argv name files in the scratch directory only.
bool confined(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a.find('/') != std::string::npos) return false;
  return true;
}

// Whether one of argv's pieces names (or contains the name of) file f.
bool named(const File& f, const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a.find(f.name) != std::string::npos) return true;
  return false;
}

// The scratch directory back to the fixed files alone; `failed`: the run
// threw, so it must have left none of its files and changed none it was given.
void restore(const std::vector<std::string>& args, bool failed) {
  std::vector<std::string> extra;
  for (const fs::directory_entry& e : fs::directory_iterator(".")) {
    const std::string name = e.path().filename().string();
    bool fixed = false;
    for (const File& f : files()) fixed = fixed || f.name == name;
    if (!fixed) extra.push_back(name);
  }
  if (failed && !extra.empty()) {
    std::fprintf(stderr, "fuzz: left behind: %s\n", extra.front().c_str());
    std::abort();
  }
  for (const std::string& name : extra) fs::remove_all(name);
  for (const File& f : files()) {
    if (!named(f, args)) continue;
    if (read_bytes(f.name) != f.bytes) {
      if (failed) {
        std::fprintf(stderr, "fuzz: a failing run changed %s\n", f.name.c_str());
        std::abort();
      }
      write_bytes(f.name, f.bytes);
    }
  }
}

}  // namespace

// The scratch directory is the working directory only while a run's action
// runs; libFuzzer's own paths (inputs, corpus, dictionary) stay the caller's.
// A crash inside an action writes its reproducer under -artifact_prefix, so
// that is made absolute (the current directory when not given).
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::string cwd = fs::current_path().string();
  original_dir() = cwd;
  static std::vector<std::string> storage;
  static std::vector<char*> args;
  bool prefix = false;
  for (int i = 0; i < *argc; ++i) {
    std::string a = (*argv)[i];
    for (const char* flag : {"-artifact_prefix=", "-exact_artifact_path="}) {
      const std::size_t n = std::strlen(flag);
      if (a.compare(0, n, flag) != 0) continue;
      prefix = true;
      if (a.size() > n && a[n] != '/') a = a.substr(0, n) + cwd + "/" + a.substr(n);
    }
    storage.push_back(a);
  }
  if (!prefix) storage.push_back("-artifact_prefix=" + cwd + "/");
  for (std::string& a : storage) args.push_back(a.data());
  args.push_back(nullptr);
  *argc = static_cast<int>(storage.size());
  *argv = args.data();

  std::string base = "/dev/shm";  // tmpfs where there is one: the outputs are fsynced
  if (::access(base.c_str(), W_OK) != 0) {
    const char* t = std::getenv("TMPDIR");
    base = t && *t ? t : "/tmp";
  }
  std::string dir = base + "/sdpa-fuzz-cli.XXXXXX";
  if (!::mkdtemp(dir.data()) || ::chdir(dir.c_str()) != 0) {
    std::perror("fuzz_cli: scratch directory");
    std::abort();
  }
  scratch() = dir;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(scratch(), ec);
  });
  make_files();
  if (::chdir(cwd.c_str()) != 0) std::abort();
  // The run's summary goes to stdout: not wanted at thousands of runs a second.
  if (!std::freopen("/dev/null", "w", stdout)) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"sdpa"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else if (cur.size() < 256) {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty() && args.size() < 40) args.push_back(cur);
  std::vector<std::string> copy = args;  // CLI11 may not modify them, but the checks below read the originals
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());

  sdpa::cli::BuiltApp built = sdpa::cli::build_app();
  try {
    built.app->parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    (void)built.app->exit(e, out, err);
    return 0;
  }
  int parsed = 0;
  for (auto& [sub, action] : built.actions) parsed += sub->parsed();
  if (parsed != 1) {
    // require_subcommand(1): exactly one subcommand after a successful parse.
    std::abort();
  }
  for (auto& [sub, action] : built.actions) {
    if (!sub->parsed() || sub->get_name() != "run" || !confined(args)) continue;
    if (::chdir(scratch().c_str()) != 0) std::abort();
    bool failed = false;
    const bool verbose = std::getenv("SDPA_FUZZ_VERBOSE") != nullptr;
    try {
      const int rc = action();
      if (verbose) std::fprintf(stderr, "fuzz: sdpa run: exit %d\n", rc);
    } catch (const std::exception& e) {
      failed = true;  // main() prints it and exits 1 or 2
      if (verbose) std::fprintf(stderr, "fuzz: sdpa run: %s\n", e.what());
    }
    restore(args, failed);
    if (::chdir(original_dir().c_str()) != 0) std::abort();
  }
  return 0;
}
