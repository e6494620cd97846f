/* The setup tail: the steps that run right before the command's exec, ONE implementation
 * of each, for every process that execs a command of ours: the native executor's child
 * (native/psb_child.c, libc: define PSB_LIBC before including this), the bwrap backend's
 * init (native/psb_bwrap_init.c, freestanding) and the session server
 * (native/psb_session.c, freestanding). Like nsjail's contain.cc, each step is one call
 * into its concern; the callers only choose when.
 *
 *   psb_tail_mount_private  a mount namespace of our own, the tree private
 *   psb_tail_ro_cover  a procfs entry bound read-only on itself
 *   psb_tail_caps      drop every capability but the kept ones, bounding set included
 *   psb_tail_nnp       PR_SET_NO_NEW_PRIVS
 *   psb_landlock_self  the command's Landlock domain (native/psb_landlock.h)
 *   psb_tail_rlimit    one resource limit (pysandbox/limits.py)
 *   psb_tail_seccomp   one classic BPF filter
 *   psb_tail_seccomp_notify  the same with a notification listener, handed over
 *   psb_tail_pty       the sandbox's terminal: a pty of its devpts, the master handed over
 *   psb_tail_listen    network proxy mode: the listener(s), handed over
 *   psb_tail_gate      the launcher's go (its lifetime monitor exists)
 *   psb_tail_exec      the exec candidates Python computed, tried as execvp
 *   psb_tail_op        one op of the op array that is one of the steps above
 *
 * Every step returns 0 (or a descriptor) or -errno, and a failure is reported by the
 * caller as the same record on every path: {stage, op index, errno}, where for the tail
 * the stage is PSB_STAGE_OP with the op index of the native op array (the native child,
 * and the bwrap init, which runs the plan's tail ops from a sealed memfd: both backends
 * name a failure alike), or, in a session's command, the step's enum psb_tail_step
 * below (pysandbox/backends/tail.py reads these names from the compiled module).
 *
 * Async-signal-safe: no malloc, no stdio, no errno (the libc build too: results are
 * -errno), no locks; the callers run them in a clone of a possibly multi-threaded
 * process or with no libc at all. */
#ifndef PSB_TAIL_H
#define PSB_TAIL_H

#include "psb_sys.h"
#include "psb.h"
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>
#include <asm/ioctls.h>
#include "psb_landlock.h"
#ifdef PSB_LIBC
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#endif

/* What failed in the tail, where no native op index says it: the session server's
 * FAILED event (errno, step). pysandbox/backends/tail.py mirrors the names, checked
 * against the compiled module on load. (USAGE to GATE but FORK, EXEC, CAPS, SECCOMP,
 * LANDLOCK, PTY, RLIMIT were the bwrap init's before it ran the op array: kept for the
 * numbering.) */
enum psb_tail_step {
    PSB_TAIL_USAGE = 1,       /* the init's own argv (a bug of ours) */
    PSB_TAIL_MOUNT_PRIVATE,   /* the init's private mount namespace */
    PSB_TAIL_PROC_READONLY,   /* a procfs cover (read-only bind) */
    PSB_TAIL_BIND_CHANGED,    /* a bind's destination is not the validated inode */
    PSB_TAIL_CAPS,
    PSB_TAIL_SECCOMP,
    PSB_TAIL_EXEC,
    PSB_TAIL_FORK,
    PSB_TAIL_LIFELINE,
    PSB_TAIL_LANDLOCK,
    PSB_TAIL_PTY,
    PSB_TAIL_RLIMIT,
    PSB_TAIL_LISTEN,
    PSB_TAIL_NNP,
    PSB_TAIL_GATE,
    PSB_TAIL_CHDIR,           /* the session server's commands: their working directory */
    PSB_TAIL_FDS,             /* the session server's commands: their descriptors */
    PSB_TAIL_CGROUP,          /* the session server's commands: their own cgroups */
};

#define PSB_TAIL_ENOENT 2
#define PSB_TAIL_EINTR 4
#define PSB_TAIL_EBADF 9
#define PSB_TAIL_EACCES 13
#define PSB_TAIL_ENOTDIR 20
#define PSB_TAIL_ENODEV 19
#define PSB_TAIL_EINVAL 22
#define PSB_TAIL_EPIPE 32
#define PSB_TAIL_ENAMETOOLONG 36
#define PSB_TAIL_EPROTO 71
#define PSB_TAIL_EAFNOSUPPORT 97
#define PSB_TAIL_EADDRNOTAVAIL 99
#define PSB_TAIL_ETIMEDOUT 110
#define PSB_TAIL_ESTALE 116
#define PSB_TAIL_EPERM 1

/* Any process with CAP_SETPCAP in its user namespace (the setup's last privileged step):
 * keep only the capabilities of mask ``keep`` (bit N: capability N), in every set and the
 * bounding set; caps up to ``last`` (or until the kernel says EINVAL: past its last).
 * PSB_F_NO_RAISE (psb.h): the kept ones stay permitted and effective only; PSB_F_NO_AMBIENT:
 * not raised into the ambient set. What the kernel holds afterwards is read back: a set
 * that is not exactly the asked one is EPERM (since Linux 6.3 capset silently drops the
 * bits of capabilities the kernel does not have). */
static long __attribute__((unused)) psb_tail_caps(unsigned long long keep, long last, int no_raise, int no_ambient)
{
    for (long cap = 0; cap <= last; cap++) {
        if (keep & (1ULL << cap))
            continue;
        long r = psb_sys(__NR_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
        if (r == -PSB_TAIL_EINVAL) {
            last = cap - 1;   /* past the kernel's last capability: nothing there to raise */
            break;
        }
        if (r < 0)
            return r;
    }
    long r = psb_sys(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (r < 0 && r != -PSB_TAIL_EINVAL)   /* EINVAL: no ambient set on this kernel */
        return r;
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2], back[2];
    unsigned long long inheritable = no_raise ? 0 : keep;
    for (int k = 0; k < 2; k++) {
        data[k].effective = data[k].permitted = (unsigned int)(keep >> (32 * k));
        data[k].inheritable = (unsigned int)(inheritable >> (32 * k));
    }
    r = psb_sys(__NR_capset, (long)&hdr, (long)data, 0, 0, 0);
    if (r < 0)
        return r;
    for (long cap = 0; cap <= last && !no_raise && !no_ambient; cap++) {
        if (keep & (1ULL << cap)) {
            r = psb_sys(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
            if (r < 0)
                return r;
        }
    }
    struct __user_cap_header_struct hdr2 = { _LINUX_CAPABILITY_VERSION_3, 0 };
    r = psb_sys(__NR_capget, (long)&hdr2, (long)back, 0, 0, 0);
    if (r < 0)
        return r;
    for (int k = 0; k < 2; k++)
        if (back[k].effective != data[k].effective || back[k].permitted != data[k].permitted)
            return -PSB_TAIL_EPERM;
    return 0;
}

/* Any process: no exec may grant privileges again (setuid bits, file capabilities). */
static long __attribute__((unused)) psb_tail_nnp(void)
{
    return psb_sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* The command's process, last before its exec: RLIMIT resource ``res`` to soft/hard
 * (RLIM_INFINITY is ~0). Every descriptor of the setup is open by then, so a low
 * RLIMIT_NOFILE never breaks the setup (pysandbox/limits.py). */
static long __attribute__((unused)) psb_tail_rlimit(long res, unsigned long soft, unsigned long hard)
{
    unsigned long lim[2] = { soft, hard };
    return psb_sys(__NR_prlimit64, 0, res, (long)lim, 0, 0);
}

/* The command's process, with no_new_privs (or CAP_SYS_ADMIN): one classic BPF program of
 * ``ninsns`` instructions. */
static long __attribute__((unused)) psb_tail_seccomp(const void *insns, unsigned long ninsns)
{
    struct sock_fprog prog = { (unsigned short)ninsns, (struct sock_filter *)insns };
    if (ninsns == 0 || ninsns > BPF_MAXINSNS)
        return -PSB_TAIL_EINVAL;
    return psb_sys(__NR_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, (long)&prog, 0, 0);
}

/* The kernel's struct msghdr and one SCM_RIGHTS message of up to two descriptors (the
 * same layout with and without libc). */
struct psb_tail_msghdr {
    void *name;
    int namelen;
    void *iov;
    unsigned long iovlen;
    void *control;
    unsigned long controllen;
    unsigned int flags;
};
struct psb_tail_cmsg {
    unsigned long len;
    int level, type;
    int fd[2];
};

/* Any process: byte ``tag`` with ``n`` (1 or 2) descriptors over unix socket ``sock``.
 * Returns 0 or -errno. */
static long __attribute__((unused)) psb_tail_send_fds(long sock, char tag, const int *fds, int n)
{
    struct { void *base; unsigned long len; } iov = { &tag, 1 };
    struct psb_tail_cmsg cm = { 16 + 4 * (unsigned long)n /* CMSG_LEN */, 1 /* SOL_SOCKET */,
                                1 /* SCM_RIGHTS */, { fds[0], n > 1 ? fds[1] : -1 } };
    struct psb_tail_msghdr msg = { 0, 0, &iov, 1, &cm, 24 /* CMSG_SPACE(n <= 2 ints) */, 0 };
    long r;
    do
        r = psb_sys(__NR_sendmsg, sock, (long)&msg, 0x4000 /* MSG_NOSIGNAL */, 0, 0);
    while (r == -PSB_TAIL_EINTR);
    return r == 1 ? 0 : r < 0 ? r : -PSB_TAIL_EPIPE;
}

/* The command's process, with no_new_privs, last filter it loads that notifies
 * (Policy.report_denials, pysandbox/denials.py): like psb_tail_seccomp, but loaded with
 * SECCOMP_FILTER_FLAG_NEW_LISTENER; the listener (close-on-exec) leaves over unix socket
 * ``sock`` (tag 'N') and is closed here with ``sock``: the command never holds it, only
 * the launcher answers its notifications. The kernel allows one listener per filter
 * chain: EBUSY when an outer sandbox of ours already reports denials. A failure after
 * the load leaves a filter whose notifying calls fail with ENOSYS; the caller fails the
 * setup, the command never runs. Returns 0 or -errno. */
static long __attribute__((unused)) psb_tail_seccomp_notify(const void *insns, unsigned long ninsns, long sock)
{
    struct sock_fprog prog = { (unsigned short)ninsns, (struct sock_filter *)insns };
    long r = -PSB_TAIL_EBADF;
    if (sock >= 0) {
        r = ninsns == 0 || ninsns > BPF_MAXINSNS ? -PSB_TAIL_EINVAL :
            psb_sys(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, (long)&prog, 0, 0);
        if (r >= 0) {
            int fd = (int)r;
            r = psb_tail_send_fds(sock, 'N', &fd, 1);
            psb_sys(__NR_close, fd, 0, 0, 0, 0);
        }
        psb_sys(__NR_close, sock, 0, 0, 0, 0);
    }
    return r < 0 ? r : 0;
}

/* The command's process (no capabilities, inside the new root): the sandbox's own
 * terminal. The master comes from the devpts instance of the sandbox's minimal /dev
 * (Python checked nothing covers it), the slave from the master itself (TIOCGPTPEER: no
 * lookup of /dev/pts/N a process could race). The master leaves over ``sock`` and is
 * closed here with ``sock``: the command never holds it. Then a session of our own (in
 * exec mode we may already lead one) with the slave as controlling terminal, so job
 * control works. ``ws``: rows << 16 | cols (0: left as is). Returns the slave
 * (close-on-exec) or -errno. */
static long __attribute__((unused)) psb_tail_pty(long sock, unsigned long ws)
{
    long master = psb_sys(__NR_openat, -100 /* AT_FDCWD */, (long)"/dev/pts/ptmx",
                          02 | 0400 | 02000000 /* O_RDWR | O_NOCTTY | O_CLOEXEC */, 0, 0);
    if (master < 0)
        return master;
    int unlock = 0;
    long slave = psb_sys(__NR_ioctl, master, TIOCSPTLCK, (long)&unlock, 0, 0);
    if (slave == 0)
        slave = psb_sys(__NR_ioctl, master, TIOCGPTPEER, 02 | 0400 | 02000000, 0, 0);
    long r = slave;
    if (r >= 0 && ws) {
        unsigned short size[4] = { (unsigned short)(ws >> 16), (unsigned short)(ws & 0xffff), 0, 0 };
        r = psb_sys(__NR_ioctl, slave, TIOCSWINSZ, (long)size, 0, 0);
    }
    if (r >= 0) {
        r = psb_sys(__NR_setsid, 0, 0, 0, 0, 0);
        if (r == -PSB_TAIL_EPERM && psb_sys(__NR_getsid, 0, 0, 0, 0, 0) == psb_sys(__NR_getpid, 0, 0, 0, 0, 0))
            r = 0;   /* we already lead a session */
    }
    if (r >= 0)
        r = psb_sys(__NR_ioctl, slave, TIOCSCTTY, 0, 0, 0);
    if (r >= 0) {
        int m = (int)master;
        r = psb_tail_send_fds(sock, 'T', &m, 1);
    }
    psb_sys(__NR_close, master, 0, 0, 0, 0);
    psb_sys(__NR_close, sock, 0, 0, 0, 0);
    if (r < 0 && slave >= 0)
        psb_sys(__NR_close, slave, 0, 0, 0, 0);
    return r < 0 ? r : slave;
}

/* Inside the sandbox's network namespace, "lo" up, before the command exists (network
 * proxy mode): the proxy's listener is made here, so it listens before the command can
 * run and no process of the sandbox serves it. 127.0.0.1:port always; [::1]:port
 * (IPV6_V6ONLY) unless the namespace has no IPv6 (EAFNOSUPPORT, EADDRNOTAVAIL:
 * ipv6.disable). The listener(s) leave over ``sock`` in one SCM_RIGHTS message (the
 * launcher serves them on the host) and are closed here with ``sock``. Returns 0 or
 * -errno. */
static long __attribute__((unused)) psb_tail_listen(long sock, long port)
{
    if (sock < 0)
        return -PSB_TAIL_EBADF;
    if (port <= 0 || port > 65535) {
        psb_sys(__NR_close, sock, 0, 0, 0, 0);
        return -PSB_TAIL_EINVAL;
    }
    int fds[2] = { -1, -1 }, n = 0;
    unsigned short nport = (unsigned short)(((port & 0xff) << 8) | ((port >> 8) & 0xff));
    struct { unsigned short family, port; unsigned int addr; unsigned char zero[8]; } a4 =
        { 2 /* AF_INET */, nport, 0x0100007f /* 127.0.0.1 */, { 0 } };
    struct { unsigned short family, port; unsigned int flow; unsigned char addr[16]; unsigned int scope; } a6 =
        { 10 /* AF_INET6 */, nport, 0, { 0 }, 0 };
    a6.addr[15] = 1;   /* ::1 */
    long r = fds[0] = (int)psb_sys(__NR_socket, 2, 1 | 02000000 /* SOCK_STREAM | SOCK_CLOEXEC */, 0, 0, 0);
    if (r >= 0)
        r = psb_sys(__NR_bind, fds[0], (long)&a4, sizeof a4, 0, 0);
    if (r >= 0)
        r = psb_sys(__NR_listen, fds[0], 4096, 0, 0, 0);
    if (r >= 0) {
        n = 1;
        long s6 = psb_sys(__NR_socket, 10, 1 | 02000000, 0, 0, 0);
        if (s6 >= 0) {
            int one = 1;
            fds[1] = (int)s6;
            r = psb_sys(__NR_setsockopt, s6, 41 /* IPPROTO_IPV6 */, 26 /* IPV6_V6ONLY */, (long)&one, sizeof one);
            if (r >= 0)
                r = psb_sys(__NR_bind, s6, (long)&a6, sizeof a6, 0, 0);
            if (r >= 0)
                r = psb_sys(__NR_listen, s6, 4096, 0, 0, 0);
            if (r >= 0)
                n = 2;
            else if (r == -PSB_TAIL_EADDRNOTAVAIL)   /* no IPv6 here */
                r = 0;
        } else if (s6 != -PSB_TAIL_EAFNOSUPPORT) {
            r = s6;
        }
    }
    if (r >= 0) {
        int send[2] = { fds[0], n == 2 ? fds[1] : -1 };
        r = psb_tail_send_fds(sock, 'L', send, n);
    }
    for (int k = 0; k < 2; k++)
        if (fds[k] >= 0)
            psb_sys(__NR_close, fds[k], 0, 0, 0, 0);
    psb_sys(__NR_close, sock, 0, 0, 0, 0);
    return r < 0 ? r : 0;
}

/* Before anything of the command exists (as_pid_1 with a launch monitor): wait for the
 * launcher's one byte on ``fd``, written once its lifetime monitor holds our pidfd
 * (native/psb_monitor.h); only the launcher holds the write end. EOF: the launcher is
 * gone or could not start the monitor, -ESRCH: the command must never run. Closes fd. */
static long __attribute__((unused)) psb_tail_gate(long fd)
{
    char go = 0;
    long r;
    while ((r = psb_sys(__NR_read, fd, (long)&go, 1, 0, 0)) == -PSB_TAIL_EINTR)
        ;
    psb_sys(__NR_close, fd, 0, 0, 0, 0);
    return r == 1 ? 0 : r < 0 ? r : -3 /* ESRCH */;
}

/* Whether ``path`` is there and not a directory (what makes an exec's EACCES count). */
static int __attribute__((unused)) psb_tail_is_file(const char *path)
{
#ifdef PSB_LIBC
    struct stat st;
    return psb_stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
#else
    unsigned int st[36];   /* x86_64 struct stat: 144 bytes, st_mode at byte 24 */
    return psb_sys(__NR_stat, (long)path, (long)st, 0, 0, 0) == 0 && (st[6] & 0170000) != 0040000;
#endif
}

/* The command's process, last: execve each of the ``ncand`` candidates Python computed
 * (pysandbox/execpath.py; back to back, NUL-terminated) in order, as execvp: after a
 * miss the next; EACCES only for a file that is there (an unsearchable directory on PATH
 * is a miss, as in a shell); else ENOENT. A name that was not searched (``searched`` 0:
 * one candidate) reports its own error. Returns only on failure, -errno. */
static long __attribute__((unused)) psb_tail_exec(const char *cand, long ncand, int searched,
                                                  char *const *argv, char *const *envp)
{
    int seen_eacces = 0;
    for (long k = 0; k < ncand; k++) {
        long e = -psb_sys(__NR_execve, (long)cand, (long)argv, (long)envp, 0, 0);
        if (!searched)
            return -e;
        if (e == PSB_TAIL_EACCES) {
            if (psb_tail_is_file(cand))
                seen_eacces = 1;
        } else if (e != PSB_TAIL_ENOENT && e != PSB_TAIL_ENOTDIR && e != PSB_TAIL_ESTALE && e != PSB_TAIL_ENODEV &&
                   e != PSB_TAIL_ETIMEDOUT && e != PSB_TAIL_ENAMETOOLONG) {
            return -e;
        }
        while (*cand)
            cand++;
        cand++;
    }
    return seen_eacces ? -PSB_TAIL_EACCES : -PSB_TAIL_ENOENT;
}

/* After the mount setup (and any nested user namespace): a mount namespace of the
 * current user namespace (its copies of the mounts are locked to the command when that
 * user namespace does not own the one before) with the whole tree private, so a mount
 * the host makes later under a shared bound subtree never appears inside. */
static long __attribute__((unused)) psb_tail_mount_private(void)
{
    long r = psb_sys(__NR_unshare, 0x00020000 /* CLONE_NEWNS */, 0, 0, 0, 0);
    return r < 0 ? r : psb_sys(__NR_mount, 0, (long)"/", 0, 16384 | (1 << 18) /* MS_REC | MS_PRIVATE */, 0);
}

/* In the new mount namespace (psb_tail_mount_private): bind ``path`` on itself read-only,
 * nosuid, nodev, noexec (a procfs entry, plan.PROC_READONLY). Absent, or already
 * read-only (bwrap 0.8 and the native backend cover sys, sysrq-trigger, irq and bus right
 * after the procfs where its setup could write them): nothing to do. 0 or -errno. */
static long __attribute__((unused)) psb_tail_ro_cover(const char *path)
{
    long r;
    int ro;
#ifdef PSB_LIBC
    struct stat st;
    struct statfs sfs;
    r = psb_fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;   /* psb_sys.h: glibc 2.17 */
    ro = r == 0 && statfs(path, &sfs) == 0 && (sfs.f_flags & 1 /* ST_RDONLY */);
#else
    unsigned long st[18];   /* x86_64 struct stat */
    long sfs[15];           /* x86_64 struct statfs: f_flags is the eleventh long; ST_RDONLY 1 */
    r = psb_sys(__NR_newfstatat, -100 /* AT_FDCWD */, (long)path, (long)st, 0x100 /* AT_SYMLINK_NOFOLLOW */, 0);
    ro = r == 0 && psb_sys(__NR_statfs, (long)path, (long)sfs, 0, 0, 0) == 0 && (sfs[10] & 1);
#endif
    if (r == -PSB_TAIL_ENOENT || ro)
        return 0;
    if (r == 0)
        r = psb_sys(__NR_mount, (long)path, (long)path, 0, 4096 | 16384 /* MS_BIND | MS_REC */, 0);
    if (r == 0)
        r = psb_sys(__NR_mount, 0, (long)path, 0,
                    32 | 4096 | 1 | 2 | 4 | 8 /* MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC */, 0);
    return r;
}

/* One op of the tail, as every executor of the op array runs it: the native child
 * (native/psb_child.c) and the bwrap init (native/psb_bwrap_init.c). ``strtab``: the
 * array's string table; ``proxy_fd``, ``notify_fd``: the launch's sockets for LISTEN and
 * a notifying SECCOMP. Returns 0 or -errno; -EINVAL for a kind that is not a tail step. */
static long __attribute__((unused)) psb_tail_op(const struct psb_op *op, const char *strtab, long proxy_fd,
                                                long notify_fd)
{
    switch (op->kind) {
    case PSB_OP_LISTEN:
        return psb_tail_listen(proxy_fd, op->n);
    case PSB_OP_CAPS:
        return psb_tail_caps((unsigned long long)op->n, op->m, (op->flags & PSB_F_NO_RAISE) != 0,
                             (op->flags & PSB_F_NO_AMBIENT) != 0);
    case PSB_OP_NNP:
        return psb_tail_nnp();
    case PSB_OP_MOUNT_PRIVATE:
        return psb_tail_mount_private();
    case PSB_OP_RO_COVER:
        return op->b < 0 ? -PSB_TAIL_EINVAL : psb_tail_ro_cover(strtab + op->b);
    case PSB_OP_LANDLOCK:
        /* the bwrap init: its descriptors are the command's */
        return psb_landlock_self(op->n, op->a >= 0 ? strtab + op->a : 0, PSB_LL_RESOLVE_NO_MAGICLINKS, 0, -1);
    case PSB_OP_SECCOMP:
        if (op->a < 0)
            return -PSB_TAIL_EINVAL;
        return op->m == 1 ? psb_tail_seccomp_notify(strtab + op->a, (unsigned long)op->n / 8, notify_fd)
                          : psb_tail_seccomp(strtab + op->a, (unsigned long)op->n / 8);
    }
    return -PSB_TAIL_EINVAL;
}

#endif
