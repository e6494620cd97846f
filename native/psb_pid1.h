/* The sandbox's pid-1 loop: ONE implementation for the three inits, the freestanding
 * memfd init (native/psb_init.c), the bwrap backend's init (native/psb_bwrap_init.c)
 * and fork mode (psb_init in native/psb_child.c, a copy of the caller, with libc:
 * define PSB_PID1_LIBC before including this).
 *
 * Runs as pid 1 of the sandbox's pid namespace, no capabilities, with every signal
 * blocked (blocked signals are queued even for a namespace init, so
 * rt_sigtimedwait sees them). Reaps every child; a signal of the forward mask (bit
 * N-1: signal N, chosen in Python) is sent on to the command; when the command
 * ends its raw wait status (4 bytes) goes to status_fd (if >= 0) and the init exits
 * with the command's code (128+N for a signal: a pid 1 cannot die of a signal it
 * did not handle, so the parent learns -N from the pipe). With ``lifeline`` the
 * status fd is O_ASYNC and owned by us (native/psb_bwrap_init.c): SIGIO (blocked by
 * the caller) means its reader may be gone; if poll says so (POLLERR: no reader; a
 * SIGIO the command sent finds the reader there), every process of the namespace is
 * killed and we exit, which ends the namespace. Never returns. */
#ifndef PSB_PID1_H
#define PSB_PID1_H

#ifdef PSB_PID1_LIBC
#include <sys/syscall.h>
#include <unistd.h>
#define PSB_PID1_SYS(n, a, b, c, d) syscall((n), (a), (b), (c), (d))
#define PSB_PID1_NR_WRITE SYS_write
#define PSB_PID1_NR_WAIT4 SYS_wait4
#define PSB_PID1_NR_KILL SYS_kill
#define PSB_PID1_NR_RT_SIGTIMEDWAIT SYS_rt_sigtimedwait
#define PSB_PID1_NR_EXIT_GROUP SYS_exit_group
#define PSB_PID1_NR_PTRACE SYS_ptrace
#define PSB_PID1_NR_POLL SYS_poll
#else
#include "psb_freestanding.h"
#define PSB_PID1_SYS(n, a, b, c, d) sys6((n), (a), (b), (c), (d), 0, 0)
#define PSB_PID1_NR_WRITE __NR_write
#define PSB_PID1_NR_WAIT4 __NR_wait4
#define PSB_PID1_NR_KILL __NR_kill
#define PSB_PID1_NR_RT_SIGTIMEDWAIT __NR_rt_sigtimedwait
#define PSB_PID1_NR_EXIT_GROUP __NR_exit_group
#define PSB_PID1_NR_PTRACE __NR_ptrace
#define PSB_PID1_NR_POLL __NR_poll
#endif
#define PSB_PID1_PTRACE_DETACH 17
#define PSB_PID1_SIGCHLD 17
#define PSB_PID1_WNOHANG 1
#define PSB_PID1_SIGIO 29

static void __attribute__((noreturn)) psb_pid1_loop(long cmd, long status_fd, unsigned long forward, int lifeline)
{
    unsigned long set = forward | (1UL << (PSB_PID1_SIGCHLD - 1)) |
                        (lifeline ? 1UL << (PSB_PID1_SIGIO - 1) : 0);
    long info[16];
    for (;;) {
        /* Reap first: the command may have exited before this loop began. */
        for (;;) {
            int st = 0;
            long p = PSB_PID1_SYS(PSB_PID1_NR_WAIT4, -1, (long)&st, PSB_PID1_WNOHANG, 0);
            if (p <= 0)
                break;
            if ((st & 0xff) == 0x7f) {
                /* A ptrace stop, not an exit: a child made us its tracer
                 * (PTRACE_TRACEME needs no permission from its parent). Never report
                 * it as the command's status: let the child go on, with its signal. */
                PSB_PID1_SYS(PSB_PID1_NR_PTRACE, PSB_PID1_PTRACE_DETACH, p, 0, (st >> 8) & 0xff);
                continue;
            }
            if (p == cmd) {
                if (status_fd >= 0)
                    PSB_PID1_SYS(PSB_PID1_NR_WRITE, status_fd, (long)&st, sizeof st, 0);
                int sig = st & 0x7f;
                for (;;)
                    PSB_PID1_SYS(PSB_PID1_NR_EXIT_GROUP, sig == 0 ? (st >> 8) & 0xff : 128 + sig, 0, 0, 0);
            }
        }
        long sig = PSB_PID1_SYS(PSB_PID1_NR_RT_SIGTIMEDWAIT, (long)&set, (long)info, 0, 8);
        if (sig == PSB_PID1_SIGIO) {
            struct { int fd; short events, revents; } pfd = { (int)status_fd, 4 /* POLLOUT */, 0 };
            if (PSB_PID1_SYS(PSB_PID1_NR_POLL, (long)&pfd, 1, 0, 0) == 1 && (pfd.revents & (8 | 16))) {
                /* POLLERR | POLLHUP: no reader, the launcher is gone */
                PSB_PID1_SYS(PSB_PID1_NR_KILL, -1, 9, 0, 0);
                for (;;)
                    PSB_PID1_SYS(PSB_PID1_NR_EXIT_GROUP, 125, 0, 0, 0);
            }
            continue;
        }
        if (sig > 0 && sig != PSB_PID1_SIGCHLD)
            PSB_PID1_SYS(PSB_PID1_NR_KILL, cmd, sig, 0, 0);
    }
}

#endif
