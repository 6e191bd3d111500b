// Binary upgrade without a lost request (nginx's USR2, HAProxy's socket hand-over): start a
// new copy of the binary from the path this process was started from (so a replaced file
// is what runs), hand it every listening socket with the LISTEN_FDS protocol that socket
// activation uses (it adopts them by address, inherited.h), and wait until it reports that
// it serves. Only then does this process stop accepting and drain. A new binary or config
// that fails to start (exit, crash, or no report in time) is killed and reaped, and this
// process keeps serving.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace sg::app {

struct HandedSocket {
  int fd;
  std::string name;  // the listener's name (LISTEN_FDNAMES), "admin" for the admin endpoint
};

struct Successor {
  pid_t pid = -1;
  std::string error;  // empty when the new process is serving
};

// The executable's path as it is now (call at startup, before the file can be replaced).
std::string own_binary_path();

Successor start_successor(const std::string& binary, const std::vector<std::string>& argv,
                          const std::vector<HandedSocket>& sockets, std::chrono::milliseconds timeout);

// In a process started by start_successor: tells the predecessor we serve. No-op otherwise.
void report_ready_to_predecessor();

}  // namespace sg::app
