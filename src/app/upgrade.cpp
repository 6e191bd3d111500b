#include "app/upgrade.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace sg::app {

namespace {

constexpr const char* kReadyFdVar = "STEALGATE_UPGRADE_READY_FD";

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// The child's environment: ours without socket-activation or upgrade variables, plus the
// hand-over. LISTEN_PID is filled in by the child (its pid is unknown before the fork).
std::vector<std::string> successor_env(const std::vector<HandedSocket>& sockets, int ready_fd) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (starts_with(*e, "LISTEN_") || starts_with(*e, kReadyFdVar)) continue;
    env.emplace_back(*e);
  }
  std::string names;
  for (const HandedSocket& s : sockets) names += (names.empty() ? "" : ":") + s.name;
  env.push_back("LISTEN_FDS=" + std::to_string(sockets.size()));
  env.push_back("LISTEN_FDNAMES=" + names);
  env.push_back(std::string(kReadyFdVar) + "=" + std::to_string(ready_fd));
  env.push_back("LISTEN_PID=00000000000000000000");  // overwritten in the child
  return env;
}

// Between fork and exec only async-signal-safe calls: no allocation, no locks.
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, char* pid_slot,
                             const int* fds, int nfds) {
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  // Park every descriptor above the target range first, so that moving one into place
  // cannot overwrite another that is still to be moved.
  const int high_base = 3 + nfds + 64;
  int high[64];
  for (int i = 0; i < nfds; ++i) high[i] = fcntl(fds[i], F_DUPFD, high_base);
  for (int i = 0; i < nfds; ++i) {
    if (high[i] < 0 || dup2(high[i], 3 + i) < 0) _exit(126);
  }
  // Nothing else crosses over: client and upstream connections stay with this process.
  close_range(3 + static_cast<unsigned>(nfds), ~0u, 0);
  // LISTEN_PID=<our pid>, written into the slot without any library formatting.
  pid_t pid = getpid();
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0);
  for (int i = 0; i < n; ++i) pid_slot[i] = digits[n - 1 - i];
  pid_slot[n] = '\0';
  execve(path, argv, envp);
  _exit(127);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "the new process exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("the new process was killed by ") + strsignal(WTERMSIG(status));
  return "the new process stopped";
}

// Waits for the child's ready byte on `fd`; returns "" or what went wrong.
std::string await_ready(pid_t pid, int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char c = 0;
    ssize_t got = ::read(fd, &c, 1);
    if (got == 1) return "";
    if (got < 0 && errno == EINTR) continue;
    // EOF: the child closed the pipe without reporting, i.e. it is exiting.
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid) return describe_exit(status);
    return "the new process closed its report pipe";
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return "the new process did not report ready within " + std::to_string(timeout.count()) + " ms (killed)";
}

}  // namespace

std::string own_binary_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<std::size_t>(n));
}

Successor start_successor(const std::string& binary, const std::vector<std::string>& argv,
                          const std::vector<HandedSocket>& sockets, std::chrono::milliseconds timeout) {
  Successor out;
  if (binary.empty()) {
    out.error = "the path of the running binary is unknown";
    return out;
  }
  if (sockets.size() > 60) {
    out.error = "too many listening sockets to hand over";
    return out;
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  const int nfds = static_cast<int>(sockets.size()) + 1;  // the sockets, then the report pipe
  std::vector<int> fds;
  for (const HandedSocket& s : sockets) fds.push_back(s.fd);
  fds.push_back(pipefd[1]);
  std::vector<std::string> env = successor_env(sockets, 3 + nfds - 1);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* pid_slot = env.back().data() + std::strlen("LISTEN_PID=");
  std::vector<std::string> args = argv;
  std::vector<char*> argvp;
  for (std::string& a : args) argvp.push_back(a.data());
  argvp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid == 0) exec_child(binary.c_str(), argvp.data(), envp.data(), pid_slot, fds.data(), nfds);
  ::close(pipefd[1]);
  if (pid < 0) {
    ::close(pipefd[0]);
    out.error = std::string("fork: ") + std::strerror(errno);
    return out;
  }
  out.pid = pid;
  out.error = await_ready(pid, pipefd[0], timeout);
  ::close(pipefd[0]);
  return out;
}

void report_ready_to_predecessor() {
  const char* v = std::getenv(kReadyFdVar);
  if (v == nullptr) return;
  int fd = std::atoi(v);
  unsetenv(kReadyFdVar);
  if (fd < 3) return;
  char one = '1';
  (void)!::write(fd, &one, 1);
  ::close(fd);
}

}  // namespace sg::app
