/* The launcher's lifetime monitor of an as_pid_1 sandbox: ONE loop for its two forms,
 * the freestanding init program in monitor mode (native/psb_init.c, exec'd from the
 * init's sealed memfd: the monitor keeps nothing of the caller's memory) and the
 * fallback where that memfd cannot be exec'd (psb_monitor_start in native/psb_spawn.c:
 * a fork of the caller, with libc: define PSB_MONITOR_LIBC before including this).
 *
 * Runs on the host, outside every namespace of the sandbox (the command can neither
 * see, signal nor ptrace it), as the launcher's uid, every signal blocked, no
 * PR_SET_PDEATHSIG (it must outlive the launcher), in a session of its own (a SIGKILL
 * to the launcher's process group does not take it along), with exactly three
 * descriptors:
 *   3  a pidfd of the sandbox's pid 1 (opened while pid 1 was the launcher's or its
 *      bwrap's unreaped child: never a reused pid)
 *   4  the read end of the lifeline pipe, whose write end only the launcher holds
 *      (close-on-exec: it never reaches bwrap or the sandbox)
 *   5  a pidfd of the launcher itself (readable once the launcher's process is gone,
 *      even if a fork of it still holds the lifeline's write end)
 * When the lifeline ends (EOF: the launcher closed it, exec'd or died) or the launcher's
 * pidfd is readable, pid 1 gets SIGKILL through its pidfd (the whole pid namespace ends
 * with it) and the monitor exits; when pid 1's pidfd is readable (it exited) the
 * monitor exits. Never returns. */
#ifndef PSB_MONITOR_H
#define PSB_MONITOR_H

#ifdef PSB_MONITOR_LIBC
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
static long psb_mon_sys(long n, long a, long b, long c, long d)
{
    long r = syscall(n, a, b, c, d);
    return r < 0 ? -errno : r;
}
#define PSB_MON_NR_POLL SYS_poll
#define PSB_MON_NR_EXIT_GROUP SYS_exit_group
#define PSB_MON_NR_RT_SIGPROCMASK SYS_rt_sigprocmask
#else
#include "psb_freestanding.h"
#define psb_mon_sys(n, a, b, c, d) sys6((n), (a), (b), (c), (d), 0, 0)
#define PSB_MON_NR_POLL __NR_poll
#define PSB_MON_NR_EXIT_GROUP __NR_exit_group
#define PSB_MON_NR_RT_SIGPROCMASK __NR_rt_sigprocmask
#endif
#define PSB_MON_NR_PIDFD_SEND_SIGNAL __NR_pidfd_send_signal
#define PSB_MON_PID1_FD 3
#define PSB_MON_LIFELINE_FD 4
#define PSB_MON_LAUNCHER_FD 5

static void __attribute__((noreturn, unused)) psb_monitor_loop(void)
{
    struct { int fd; short events, revents; } pfd[3] = {
        { PSB_MON_PID1_FD, 1 /* POLLIN */, 0 },
        { PSB_MON_LIFELINE_FD, 1, 0 },
        { PSB_MON_LAUNCHER_FD, 1, 0 },
    };
    /* Every signal, also the two libc's pthread_sigmask leaves unblocked (32, 33). */
    unsigned long all = ~0UL;
    psb_mon_sys(PSB_MON_NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&all, 0, 8);
    for (;;) {
        long n = psb_mon_sys(PSB_MON_NR_POLL, (long)pfd, 3, -1, 0);
        if (n == -4 /* EINTR */ || n == -11 /* EAGAIN */ || n == -12 /* ENOMEM */)
            continue;
        /* Any other poll failure: a monitor that cannot watch fails closed. */
        if (n < 0 || pfd[1].revents || pfd[2].revents)
            psb_mon_sys(PSB_MON_NR_PIDFD_SEND_SIGNAL, PSB_MON_PID1_FD, 9 /* SIGKILL */, 0, 0);
        if (n < 0 || pfd[0].revents || pfd[1].revents || pfd[2].revents)
            for (;;)
                psb_mon_sys(PSB_MON_NR_EXIT_GROUP, 0, 0, 0, 0);
    }
}

#endif
