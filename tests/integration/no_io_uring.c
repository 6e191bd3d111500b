/* Runs a command where io_uring_setup fails with EPERM, as under a container's seccomp
 * profile or a systemd SystemCallFilter without it:  no_io_uring PROGRAM [ARGS...]
 * (tests/integration/test_io_driver.py: auto falls back to epoll, io_uring is refused).
 * With NO_IO_URING_SYSCALL=register it refuses io_uring_register instead (a filter that
 * admits only io_uring_setup and io_uring_enter). */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  const char* which = getenv("NO_IO_URING_SYSCALL");
  const unsigned refused = which != NULL && strcmp(which, "register") == 0 ? __NR_io_uring_register : __NR_io_uring_setup;
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("no_io_uring: seccomp");
    return 2;
  }
  execv(argv[1], argv + 1);
  perror("no_io_uring: exec");
  return 127;
}
