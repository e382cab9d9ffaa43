// `sdpa serve`: the explorer, a web page that shows why attention scores are
// divided by √d_k, with every number computed by this library.
//
// The page (web/, embedded at build time) and the JSON API (explorer_api.h)
// are served by cpp-httplib on loopback by default. Ctrl-C (SIGINT) or
// SIGTERM stops the server and exits 0.
#include <httplib.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "commands.h"
#include "explorer_api.h"

namespace sdpa::cli {
namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const unsigned char c = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

struct ServeArgs {
  int port = 8080;
  std::string host = "127.0.0.1";
};

// Whether every address `host` resolves to is a loopback one (only this
// machine can then connect).
bool binds_loopback_only(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &res) != 0 || res == nullptr) return false;
  bool all = true;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      all = all && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    } else {
      all = false;
    }
  }
  freeaddrinfo(res);
  return all;
}

std::string url_host(const std::string& host) {
  if (host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "[::1]";
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Why binding host:port failed: the errno of the same bind done by hand
// (httplib only reports success or failure). 0 when it would succeed now.
int bind_errno(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return EADDRNOTAVAIL;
  int err = 0;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    err = errno;
  } else {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  return err;
}

const char* status_text(int status) {
  switch (status) {
    case 400: return "bad request";
    case 403: return "forbidden";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 413: return "request body larger than 65536 bytes";
    case 414: return "request URI too long";
    case 503: return "server busy; try again shortly";
    default: return "request failed";
  }
}

int serve(const ServeArgs& args) {
  // SIGINT/SIGTERM write their number to a pipe (all a handler may safely
  // do); a watcher thread reads it and stops the server. A handler works
  // whichever thread the signal lands on, including threads that libraries
  // started before this function ran.
  if (pipe(g_signal_pipe) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  httplib::Server server;
  // Plain SO_REUSEADDR: httplib's default adds SO_REUSEPORT, under which a
  // second server on a busy port would start without an error.
  socket_t listening = INVALID_SOCKET;
  server.set_socket_options([&listening](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;  // the last one offered is the one bound
  });
  server.set_payload_max_length(explorer::kMaxBodyBytes);
  // An idle keep-alive connection holds its worker until this timeout, and
  // stop() waits for the workers: keep Ctrl-C prompt with a page still open.
  server.set_keep_alive_timeout(1);
  server.set_default_headers({
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-store"},
      {"Content-Security-Policy",
       "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
  });
  const bool loopback = binds_loopback_only(args.host);
  const explorer::HostCheck check(args.host);
  server.set_pre_routing_handler([&check](const httplib::Request& req, httplib::Response& res) {
    const std::string host = req.get_header_value("Host");
    if (req.get_header_value_count("Host") != 1 || !check.host_ok(host)) {
      res.status = 403;
      res.set_content(explorer::error_body("Host header must name this server (localhost, 127.0.0.1, [::1] or its "
                                           "--host, with an optional port), got " +
                                           (req.has_header("Host") ? "\"" + host.substr(0, 64) + "\"" : "none")),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Origin") &&
        (req.get_header_value_count("Origin") != 1 || !check.origin_ok(req.get_header_value("Origin")))) {
      res.status = 403;
      res.set_content(explorer::error_body("Origin header must be a page of this server, got \"" +
                                           req.get_header_value("Origin").substr(0, 64) + "\""),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // The costly endpoints (growth, curve, misconceptions) run on all cores
  // but one, a few more wait their turn, and the rest are answered 503 at
  // once. httplib's pool has a thread for each of those and kLightThreads
  // more, so that cheap requests and the page are answered while the costly
  // ones run.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int running = static_cast<int>(std::clamp(cores - 1, 1u, 4u));
  const int waiting = 2 * running + 2;
  constexpr int kLightThreads = 8;
  explorer::WorkGate gate(running, waiting);
  const std::size_t threads = static_cast<std::size_t>(running + waiting + kLightThreads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  auto api = [&gate](const httplib::Request& req, httplib::Response& res) {
    const explorer::Response r = explorer::handle(req.method, req.path, req.body, &gate);
    res.status = r.status;
    if (r.retry_after > 0) res.set_header("Retry-After", std::to_string(r.retry_after));
    res.set_content(r.body, "application/json");
  };
  server.Get(R"(/api/.*)", api);
  server.Post(R"(/api/.*)", api);
  // The page: a fixed set of embedded files; any other path is 404.
  server.Get(R"(/.*)", [](const httplib::Request& req, httplib::Response& res) {
    if (const explorer::Asset* a = explorer::find_asset(req.path)) {
      res.set_content(std::string(a->body), std::string(a->content_type).c_str());
    } else {
      res.status = 404;
      res.set_content("not found\n", "text/plain; charset=utf-8");
    }
  });
  // httplib's own errors (413, unmatched routes and methods, malformed
  // requests) get a body in the API's shape.
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const bool api_path = req.path.rfind("/api/", 0) == 0;
    if (res.status == 413 || api_path) {
      res.set_content(explorer::error_body(status_text(res.status), res.status == 413 ? "body" : ""),
                      "application/json");
    } else {
      res.set_content(std::string(status_text(res.status)) + "\n", "text/plain; charset=utf-8");
    }
    return httplib::Server::HandlerResponse::Handled;
  }));

  int port = args.port;
  if (port == 0) {
    port = server.bind_to_any_port(args.host);
  } else if (!server.bind_to_port(args.host, port)) {
    port = -1;
  }
  if (port < 0) {
    const int err = bind_errno(args.host, args.port);
    if (err == EADDRINUSE) {
      std::fprintf(stderr, "sdpa serve: port %d is in use; try --port %d (or --port 0 for any free port)\n",
                   args.port, args.port == 65535 ? 8080 : args.port + 1);
    } else {
      std::fprintf(stderr, "sdpa serve: cannot listen on %s port %d: %s\n", args.host.c_str(), args.port,
                   err ? std::strerror(err) : "bind failed");
    }
    return kExitFailure;
  }

  // httplib listens with a backlog of 5: a burst of connections beyond it
  // would wait for the client's SYN retry (a second or more). Linux takes a
  // second listen() on the bound socket as a new backlog.
  if (listening != INVALID_SOCKET) (void)::listen(listening, SOMAXCONN);

  std::printf("sdpa explorer: http://%s:%d/  (Ctrl-C to stop)\n", url_host(args.host).c_str(), port);
  if (!loopback) {
    std::printf("note: listening on %s, not only on this machine's loopback interface\n", args.host.c_str());
  }
  std::fflush(stdout);

  std::atomic<int> caught{0};
  std::thread watcher([&] {
    unsigned char sig = 0;
    ssize_t n;
    while ((n = read(g_signal_pipe[0], &sig, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1 && sig != 0) {
      caught = sig;
      server.stop();
    }
  });
  const bool ok = server.listen_after_bind();
  const unsigned char wake = 0;  // the server stopped by itself: release the watcher
  if (caught.load() == 0) (void)!write(g_signal_pipe[1], &wake, 1);
  watcher.join();
  if (caught.load() != 0) {
    std::printf("sdpa explorer: stopped (%s)\n", caught.load() == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    return kExitOk;
  }
  if (!ok) {
    std::fprintf(stderr, "sdpa serve: the server stopped unexpectedly\n");
    return kExitFailure;
  }
  return kExitOk;
}

const Registrar registrar{Command{
    "serve",
    "Serve the explorer: a web page showing why scores are divided by √d_k",
    [](CLI::App& sub) {
      auto args = std::make_shared<ServeArgs>();
      sub.add_option("--port", args->port, "TCP port; 0 picks a free one and prints it")
          ->capture_default_str()
          ->check(CLI::Range(0, 65535));
      sub.add_option("--host", args->host, "Address to listen on (loopback by default)")->capture_default_str();
      return [args] { return serve(*args); };
    },
    60,
}};

}  // namespace
}  // namespace sdpa::cli
