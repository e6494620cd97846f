/* The bwrap backend's pid-1 init, as a freestanding static program (no libc).
 * build_native.py compiles it and embeds the bytes in pysandbox._native; the bwrap
 * backend puts it in a sealed, execute-only memfd and has bwrap exec it as the command
 * under --as-pid-1 (through /proc/self/fd/N), so bwrap's own pid 1 (same uid,
 * dumpable, ptraceable by the command) never exists.
 *
 * argv: psb-bwrap-init STATUS_FD SELF_FD [options] -- EXE ARGV0 ARGS...
 *   -N            a new mount namespace (owned by our user namespace: bwrap may have
 *                 entered a second one, with --disable-userns or for devpts, that does
 *                 not own bwrap's mount namespace); its copies of bwrap's mounts are
 *                 locked to the command
 *   -P            make the whole mount tree private (MS_REC|MS_PRIVATE on /)
 *   -r PATH       bind PATH on itself and remount it read-only (skipped if absent)
 *   -b DEST DEV INO   fail closed unless lstat(DEST) has that st_dev and st_ino
 *   -s FD         install the classic BPF program read from FD (in the command only)
 *   -c MASK       the capabilities the command keeps (hex); all others are dropped
 *                 from every set and the bounding set (needs CAP_SETPCAP)
 *   -n            with -c: the kept capabilities stay permitted and effective only,
 *                 nothing is raised into the inheritable or ambient sets
 *                 (Policy.caps_ambient=False, as the native PSB_F_NO_RAISE)
 *   -L KIND       put the command in a Landlock domain of its own before its exec
 *                 (native/psb_landlock.h says why; KIND 1: filesystem, 2: signal
 *                 scope) and make this init dumpable, so its owner can read
 *                 /proc/PID/environ and open /proc/PID/ns/ (what flatpak enter does
 *                 with bwrap's child-pid) while nothing in the sandbox can reach it,
 *                 whatever capabilities the command keeps
 *   -t FD MASK WS the sandbox's terminal (pysandbox/terminal.py): in the command's
 *                 process, before its seccomp filters, open a pty in the sandbox's
 *                 devpts (/dev/pts/ptmx), send the master over unix socket FD
 *                 (SCM_RIGHTS) and close it and FD; a new session with the slave as
 *                 controlling terminal; the slave becomes descriptor n for each bit
 *                 1 << n of MASK; WS (rows << 16 | cols, decimal; 0: none) its size
 *   -R RES SOFT HARD  setrlimit(RES) in the command's process right before its seccomp
 *                 filters and exec, after the pty (pysandbox/limits.py): the setup is
 *                 never under them
 *   -p FD PORT    network proxy mode: right away, in this process (inside the sandbox's
 *                 network namespace, whose lo bwrap brought up; before the command
 *                 exists) listen on 127.0.0.1:PORT and [::1]:PORT (unless the namespace
 *                 has no IPv6), send the listener(s) over unix socket FD (SCM_RIGHTS)
 *                 and close them and FD, as native/psb_util.c psb_listen_send
 *   -w FD         wait for one byte on FD before anything of the command exists, then
 *                 close FD: the launcher writes it once its lifetime monitor of this
 *                 as_pid_1 sandbox holds our pidfd (pysandbox/backends/monitor.py); EOF
 *                 (the launcher is gone, or it could not start the monitor): exit 125,
 *                 the command never runs
 *   -x            exec mode: no fork; after the setup, write STARTED and exec the
 *                 command in this process (as_pid_1, or no pid namespace); an exec
 *                 failure is FAILED after STARTED and exit 126
 *
 * Order: PR_SET_DUMPABLE 0 (the memfd is execute-only, so exec already made us
 * undumpable), PR_SET_PDEATHSIG SIGKILL and a lifeline check (the status pipe's
 * reader, the launcher, still exists), mounts, bind checks, capability drop; then the
 * command is forked (signals restored, status pipe closed, seccomp installed) and
 * exec'd. The init reaps orphans, forwards SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1
 * SIGUSR2 to the command, and reports on the status pipe, 4-byte little-endian words:
 *   STARTED                   the command was exec'd
 *   FAILED, WHAT, DETAIL      setup failed (the command never ran): WHAT below,
 *                             DETAIL an errno or an option index
 *   STATUS                    the command's raw wait status (after STARTED), then
 *                             the init exits with the command's code (128+N). */

#if defined(__x86_64__)
#include "psb_pid1.h"
#include "psb_landlock.h"
PSB_START(psb_binit_main);

#define NR_READ 0
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_POLL 7
#define NR_RT_SIGPROCMASK 14
#define NR_FORK 57
#define NR_EXECVE 59
#define NR_EXIT 60
#define NR_WAIT4 61
#define NR_FCNTL 72
#define NR_CAPGET 125
#define NR_CAPSET 126
#define NR_PRCTL 157
#define NR_MOUNT 165
#define NR_EXIT_GROUP 231
#define NR_NEWFSTATAT 262
#define NR_STATFS 137
#define NR_PIPE2 293
#define NR_UNSHARE 272
#define NR_IOCTL 16
#define NR_DUP2 33
#define NR_GETPID 39
#define NR_SENDMSG 46
#define NR_SETSID 112
#define NR_GETSID 124
#define NR_OPENAT 257
#define NR_PRLIMIT64 302
#define NR_SOCKET 41
#define NR_BIND 49
#define NR_LISTEN 50
#define NR_SETSOCKOPT 54
#else
#error "psb_bwrap_init: unsupported architecture"
#endif

#define SIGHUP 1
#define SIGINT 2
#define SIGQUIT 3
#define SIGKILL 9
#define SIGUSR1 10
#define SIGUSR2 12
#define SIGTERM 15
#define SIGCHLD 17
#define SIGIO 29
#define PR_SET_PDEATHSIG 1
#define PR_SET_DUMPABLE 4
#define PR_SET_SECCOMP 22
#define PR_CAPBSET_DROP 24
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#define SECCOMP_MODE_FILTER 2
#define MS_RDONLY 1
#define MS_NOSUID 2
#define MS_NODEV 4
#define MS_NOEXEC 8
#define MS_REMOUNT 32
#define MS_BIND 4096
#define MS_REC 16384
#define MS_PRIVATE (1 << 18)
#define CLONE_NEWNS 0x00020000
#define AT_SYMLINK_NOFOLLOW 0x100
#define AT_FDCWD -100
#define F_SETFD 2
#define F_GETFL 3
#define F_SETFL 4
#define F_SETOWN 8
#define O_ASYNC 020000
#define FD_CLOEXEC 1
#define O_CLOEXEC 02000000
#define POLLOUT 4
#define POLLERR 8
#define POLLHUP 16
#define ENOENT 2
#define EACCES 13
#define EINVAL 22
#define EPERM 1

#define W_STARTED 0x50534201
#define W_FAILED 0x50534202
/* WHAT of a failure */
#define F_USAGE 1
#define F_MOUNT_PRIVATE 2
#define F_MOUNT_READONLY 3
#define F_BIND_CHANGED 4
#define F_CAPS 5
#define F_SECCOMP 6
#define F_EXEC 7
#define F_FORK 8
#define F_LIFELINE 9
#define F_LANDLOCK 10
#define F_PTY 11
#define F_RLIMIT 12
#define MAX_RLIMITS 8
#define F_PROXY 13
#define O_RDWR 2
#define O_NOCTTY 0400
#define TIOCSCTTY 0x540E
#define TIOCSWINSZ 0x5414
#define TIOCSPTLCK 0x40045431
#define TIOCGPTPEER 0x5441
#define SOL_SOCKET 1
#define SCM_RIGHTS 1
#define MSG_NOSIGNAL 0x4000

struct kstat {   /* x86_64 struct stat */
    unsigned long st_dev, st_ino, st_nlink;
    unsigned int st_mode, st_uid, st_gid, pad0;
    unsigned long st_rdev;
    long st_size, st_blksize, st_blocks;
    unsigned long times[6];
    long unused[3];
};
struct cap_header { unsigned int version; int pid; };
struct cap_data { unsigned int effective, permitted, inheritable; };
struct sock_fprog { unsigned short len; void *filter; };
struct pollfd { int fd; short events, revents; };

#define MAX_FILTERS 32
#define FILTER_BYTES (4096 * 8)   /* BPF_MAXINSNS instructions */
static unsigned char filters[MAX_FILTERS][FILTER_BYTES + 8];
static unsigned short filter_len[MAX_FILTERS];

static int streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* The -c mask: lower-case hex digits (decimal arguments use psb_freestanding.h's parse). */
static long parse_hex(const char *s)
{
    unsigned long v = 0;
    if (s == 0 || *s == 0)
        return -1;
    for (; *s; s++) {
        int d;
        if (*s >= '0' && *s <= '9')
            d = *s - '0';
        else if (*s >= 'a' && *s <= 'f')
            d = *s - 'a' + 10;
        else
            return -1;
        v = v * 16 + (unsigned long)d;
    }
    return (long)v;
}

struct iovec { void *base; unsigned long len; };
struct msghdr {
    void *name; int namelen; struct iovec *iov; unsigned long iovlen;
    void *control; unsigned long controllen; int flags;
};
struct cmsg_fd { unsigned long len; int level, type; int fd; int pad; };   /* CMSG_SPACE(sizeof(int)) */

/* Runs in the command's process (no capabilities, before its seccomp filters): the
 * sandbox's own terminal, as native/psb_child.c psb_open_pty does (the master from
 * the sandbox's devpts, the slave through TIOCGPTPEER, the master sent to the
 * launcher and closed here). Returns 0 or -errno. */
static long open_pty(long sock, long mask, long ws)
{
    long master = sys6(NR_OPENAT, AT_FDCWD, (long)"/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0, 0, 0);
    if (master < 0)
        return master;
    int unlock = 0;
    long r = sys6(NR_IOCTL, master, TIOCSPTLCK, (long)&unlock, 0, 0, 0);
    long slave = r < 0 ? r : sys6(NR_IOCTL, master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC, 0, 0, 0);
    if (slave < 0) {
        sys6(NR_CLOSE, master, 0, 0, 0, 0, 0);
        return slave;
    }
    unsigned short size[4] = { (unsigned short)(ws >> 16), (unsigned short)(ws & 0xffff), 0, 0 };
    r = ws ? sys6(NR_IOCTL, slave, TIOCSWINSZ, (long)size, 0, 0, 0) : 0;
    if (r == 0) {
        r = sys6(NR_SETSID, 0, 0, 0, 0, 0, 0);
        if (r == -EPERM && sys6(NR_GETSID, 0, 0, 0, 0, 0, 0) == sys6(NR_GETPID, 0, 0, 0, 0, 0, 0))
            r = 0;   /* exec mode: we already lead the session bwrap made */
    }
    if (r >= 0)
        r = sys6(NR_IOCTL, slave, TIOCSCTTY, 0, 0, 0, 0);
    if (r >= 0) {
        char byte = 'T';
        struct iovec iov = { &byte, 1 };
        struct cmsg_fd cm = { 20 /* CMSG_LEN(sizeof(int)) */, SOL_SOCKET, SCM_RIGHTS, (int)master, 0 };
        struct msghdr msg = { 0, 0, &iov, 1, &cm, 24, 0 };
        do
            r = sys6(NR_SENDMSG, sock, (long)&msg, MSG_NOSIGNAL, 0, 0, 0);
        while (r == -4 /* EINTR */);
        if (r == 0)
            r = -EINVAL;
    }
    sys6(NR_CLOSE, master, 0, 0, 0, 0, 0);
    sys6(NR_CLOSE, sock, 0, 0, 0, 0, 0);
    for (long fd = 0; r >= 0 && fd < 3; fd++)
        if (mask & (1L << fd))
            r = sys6(NR_DUP2, slave, fd, 0, 0, 0, 0);
    sys6(NR_CLOSE, slave, 0, 0, 0, 0, 0);
    return r < 0 ? r : 0;
}

struct cmsg_fds { unsigned long len; int level, type; int fd[2]; };   /* CMSG_SPACE(2 * sizeof(int)) */

/* Runs in the init (inside the sandbox's network namespace, lo up, before the fork of
 * the command): the proxy's listener(s), as native/psb_util.c psb_listen_send. Returns
 * 0 or -errno; the listeners and sock are closed either way. */
static long listen_send(long sock, long port)
{
    long fds[2] = { -1, -1 }, r;
    int n = 0;
    unsigned short nport = (unsigned short)(((port & 0xff) << 8) | ((port >> 8) & 0xff));
    struct { unsigned short family, port; unsigned int addr; unsigned char zero[8]; } a4 =
        { 2 /* AF_INET */, nport, 0x0100007f /* 127.0.0.1 */, { 0 } };
    struct { unsigned short family, port; unsigned int flow; unsigned char addr[16]; unsigned int scope; } a6 =
        { 10 /* AF_INET6 */, nport, 0, { 0 }, 0 };
    a6.addr[15] = 1;   /* ::1 */
    r = fds[0] = sys6(NR_SOCKET, 2, 1 | O_CLOEXEC /* SOCK_STREAM */, 0, 0, 0, 0);
    if (r >= 0)
        r = sys6(NR_BIND, fds[0], (long)&a4, sizeof a4, 0, 0, 0);
    if (r >= 0)
        r = sys6(NR_LISTEN, fds[0], 4096, 0, 0, 0, 0);
    if (r >= 0) {
        n = 1;
        fds[1] = sys6(NR_SOCKET, 10, 1 | O_CLOEXEC, 0, 0, 0, 0);
        if (fds[1] >= 0) {
            int one = 1;
            r = sys6(NR_SETSOCKOPT, fds[1], 41 /* IPPROTO_IPV6 */, 26 /* IPV6_V6ONLY */, (long)&one, sizeof one, 0);
            if (r >= 0)
                r = sys6(NR_BIND, fds[1], (long)&a6, sizeof a6, 0, 0, 0);
            if (r >= 0)
                r = sys6(NR_LISTEN, fds[1], 4096, 0, 0, 0, 0);
            if (r >= 0)
                n = 2;
            else if (r == -99 /* EADDRNOTAVAIL: no IPv6 here */)
                r = 0;
        } else if (fds[1] != -97 /* EAFNOSUPPORT */) {
            r = fds[1];
        }
    }
    if (r >= 0) {
        char byte = 'L';
        struct iovec iov = { &byte, 1 };
        struct cmsg_fds cm = { 16 + 4 * (unsigned long)n /* CMSG_LEN */, SOL_SOCKET, SCM_RIGHTS,
                               { (int)fds[0], (int)fds[1] } };
        struct msghdr msg = { 0, 0, &iov, 1, &cm, 24, 0 };
        do
            r = sys6(NR_SENDMSG, sock, (long)&msg, MSG_NOSIGNAL, 0, 0, 0);
        while (r == -4 /* EINTR */);
        if (r == 0)
            r = -EINVAL;
    }
    for (int k = 0; k < 2; k++)
        if (fds[k] >= 0)
            sys6(NR_CLOSE, fds[k], 0, 0, 0, 0, 0);
    sys6(NR_CLOSE, sock, 0, 0, 0, 0, 0);
    return r < 0 ? r : 0;
}

static long status_fd = -1;
static unsigned long rlimits[MAX_RLIMITS][3];
static int nrlimits;

/* Runs in the command's process: the sandbox's rlimits. Returns 0 or -errno. */
static long set_rlimits(void)
{
    for (int k = 0; k < nrlimits; k++) {
        unsigned long lim[2] = { rlimits[k][1], rlimits[k][2] };
        long r = sys6(NR_PRLIMIT64, 0, (long)rlimits[k][0], (long)lim, 0, 0, 0);
        if (r < 0)
            return r;
    }
    return 0;
}

static void put(unsigned int word)
{
    sys6(NR_WRITE, status_fd, (long)&word, sizeof word, 0, 0, 0);
}

static void __attribute__((noreturn)) fail(unsigned int what, long detail)
{
    unsigned int words[3] = { W_FAILED, what, (unsigned int)detail };
    sys6(NR_WRITE, status_fd, (long)words, sizeof words, 0, 0, 0);
    quit(126);
}

void __attribute__((noreturn, used)) psb_binit_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    /* First: nothing in the sandbox may ptrace us (already so: exec of an unreadable file). */
    sys6(NR_PRCTL, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
    if (argc < 3)
        quit(127);
    status_fd = parse(argv[1]);
    long self_fd = parse(argv[2]);
    if (status_fd < 3)
        quit(127);
    sys6(NR_FCNTL, status_fd, F_SETFD, FD_CLOEXEC, 0, 0, 0);
    if (self_fd >= 3)
        sys6(NR_CLOSE, self_fd, 0, 0, 0, 0, 0);
    /* Die with bwrap (set by bwrap's --die-with-parent too; set again, nothing undid it
     * yet), and bind our life to the launcher's: the status pipe's reader. bwrap dies
     * with the launcher's spawning *thread* (PR_SET_PDEATHSIG, pysandbox/backends/
     * bwrap_launch.py), which can exit before the launcher's other threads close the
     * pipe: bwrap may die before this prctl while the reader is still open. So the pipe
     * is O_ASYNC, owned by us: the last reader's close sends us SIGIO (fs/pipe.c,
     * kill_fasync; blocked, so queued, and forced to a namespace init), and
     * psb_pid1_loop ends the sandbox on it. Set before the check: a reader that goes
     * after the check is a pending SIGIO. */
    sys6(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    unsigned long set = (1UL << (SIGHUP - 1)) | (1UL << (SIGINT - 1)) | (1UL << (SIGQUIT - 1)) |
                        (1UL << (SIGUSR1 - 1)) | (1UL << (SIGUSR2 - 1)) | (1UL << (SIGTERM - 1)) |
                        (1UL << (SIGCHLD - 1)) | (1UL << (SIGIO - 1));
    unsigned long oldset = 0;
    sys6(NR_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, (long)&set, (long)&oldset, 8, 0, 0);
    long fl = sys6(NR_FCNTL, status_fd, F_GETFL, 0, 0, 0, 0);
    if (fl < 0 || sys6(NR_FCNTL, status_fd, F_SETOWN, sys6(NR_GETPID, 0, 0, 0, 0, 0, 0), 0, 0, 0) < 0 ||
        sys6(NR_FCNTL, status_fd, F_SETFL, fl | O_ASYNC, 0, 0, 0) < 0)
        quit(125);
    struct pollfd pfd = { (int)status_fd, POLLOUT, 0 };
    if (sys6(NR_POLL, (long)&pfd, 1, 0, 0, 0, 0) < 0 || (pfd.revents & (POLLERR | POLLHUP)))
        quit(125);

    long i = 3;
    int nfilters = 0;
    long capmask = -1;
    int no_raise = 0;
    int exec_mode = 0;
    long landlock = 0;
    long pty_sock = -1, pty_mask = 0, pty_ws = 0;
    long gate = -1;
    for (; i < argc && !streq(argv[i], "--"); i++) {
        const char *o = argv[i];
        if (streq(o, "-N")) {
            long r = sys6(NR_UNSHARE, CLONE_NEWNS, 0, 0, 0, 0, 0);
            if (r < 0)
                fail(F_MOUNT_PRIVATE, -r);
        } else if (streq(o, "-P")) {
            long r = sys6(NR_MOUNT, 0, (long)"/", 0, MS_REC | MS_PRIVATE, 0, 0);
            if (r < 0)
                fail(F_MOUNT_PRIVATE, -r);
        } else if (streq(o, "-r") && i + 1 < argc) {
            const char *p = argv[++i];
            struct kstat st;
            long r = sys6(NR_NEWFSTATAT, AT_FDCWD, (long)p, (long)&st, AT_SYMLINK_NOFOLLOW, 0, 0);
            if (r == -ENOENT)
                continue;
            /* Already read-only (bwrap 0.8 covers sys, sysrq-trigger, irq and bus itself
             * where its setup could write them): one mount, as the native backend. struct
             * statfs on x86_64: f_flags is the eleventh long; ST_RDONLY is 1. */
            long sfs[15];
            if (r == 0 && sys6(NR_STATFS, (long)p, (long)sfs, 0, 0, 0, 0) == 0 && (sfs[10] & 1))
                continue;
            if (r == 0)
                r = sys6(NR_MOUNT, (long)p, (long)p, 0, MS_BIND | MS_REC, 0, 0);
            if (r == 0)
                r = sys6(NR_MOUNT, 0, (long)p, 0, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                         0, 0);
            if (r < 0)
                fail(F_MOUNT_READONLY, i);
        } else if (streq(o, "-b") && i + 3 < argc) {
            const char *p = argv[i + 1];
            long dev = parse(argv[i + 2]), ino = parse(argv[i + 3]);
            struct kstat st;
            long r = sys6(NR_NEWFSTATAT, AT_FDCWD, (long)p, (long)&st, AT_SYMLINK_NOFOLLOW, 0, 0);
            /* EACCES: a parent bwrap made (0700, owned by the setup's uid) keeps this uid
             * out; the command, with this uid and no capabilities, cannot reach the bind
             * either, so whatever is bound there is out of its reach too. */
            if (r != -EACCES && (r < 0 || (long)st.st_dev != dev || (long)st.st_ino != ino))
                fail(F_BIND_CHANGED, i);
            i += 3;
        } else if (streq(o, "-s") && i + 1 < argc) {
            if (nfilters >= MAX_FILTERS)
                fail(F_SECCOMP, i);
            long fd = parse(argv[++i]);
            long got = 0, r;
            while (got <= FILTER_BYTES &&
                   (r = sys6(NR_READ, fd, (long)(filters[nfilters] + got), FILTER_BYTES + 8 - got, 0, 0, 0)) > 0)
                got += r;
            if (fd < 0 || got <= 0 || got % 8 != 0 || got > FILTER_BYTES)
                fail(F_SECCOMP, i);
            sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
            filter_len[nfilters++] = (unsigned short)(got / 8);
        } else if (streq(o, "-t") && i + 3 < argc) {
            pty_sock = parse(argv[i + 1]);
            pty_mask = parse(argv[i + 2]);
            pty_ws = parse(argv[i + 3]);
            if (pty_sock < 3 || pty_mask < 0 || pty_ws < 0)
                fail(F_USAGE, i);
            sys6(NR_FCNTL, pty_sock, F_SETFD, FD_CLOEXEC, 0, 0, 0);
            i += 3;
        } else if (streq(o, "-R") && i + 3 < argc) {
            long res = parse(argv[i + 1]), soft = parse(argv[i + 2]), hard = parse(argv[i + 3]);
            if (nrlimits >= MAX_RLIMITS || res < 0 || soft < 0 || hard < 0)
                fail(F_USAGE, i);
            rlimits[nrlimits][0] = (unsigned long)res;
            rlimits[nrlimits][1] = (unsigned long)soft;
            rlimits[nrlimits][2] = (unsigned long)hard;
            nrlimits++;
            i += 3;
        } else if (streq(o, "-p") && i + 2 < argc) {
            long sock = parse(argv[i + 1]), port = parse(argv[i + 2]);
            if (sock < 3 || port <= 0 || port > 65535)
                fail(F_USAGE, i);
            long e = listen_send(sock, port);
            if (e < 0)
                fail(F_PROXY, -e);
            i += 2;
        } else if (streq(o, "-w") && i + 1 < argc) {
            gate = parse(argv[++i]);
            if (gate < 3)
                fail(F_USAGE, i);
            sys6(NR_FCNTL, gate, F_SETFD, FD_CLOEXEC, 0, 0, 0);
        } else if (streq(o, "-x")) {
            exec_mode = 1;
        } else if (streq(o, "-n")) {
            no_raise = 1;
        } else if (streq(o, "-L") && i + 1 < argc) {
            landlock = parse(argv[++i]);
            if (landlock != PSB_LANDLOCK_FS && landlock != PSB_LANDLOCK_SIGNAL)
                fail(F_USAGE, i);
        } else if (streq(o, "-c") && i + 1 < argc) {
            capmask = parse_hex(argv[++i]);
            if (capmask < 0)
                fail(F_USAGE, i);
        } else {
            fail(F_USAGE, i);
        }
    }
    if (i + 2 >= argc)
        fail(F_USAGE, i);
    char *exe = argv[i + 1];
    char **cargv = argv + i + 2;

    if (capmask >= 0) {
        /* The bounding set first (needs CAP_SETPCAP), then every other set. */
        for (long cap = 0; cap < 64; cap++) {
            if (capmask & (1L << cap))
                continue;
            long r = sys6(NR_PRCTL, PR_CAPBSET_DROP, cap, 0, 0, 0, 0);
            if (r == -EINVAL)
                break;   /* past the last capability */
            if (r < 0)
                fail(F_CAPS, -r);
        }
        if (sys6(NR_PRCTL, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0) < 0)
            fail(F_CAPS, 0);
        struct cap_header h = { 0x20080522, 0 };
        struct cap_data d[2];
        for (int k = 0; k < 2; k++) {
            unsigned int m = (unsigned int)((unsigned long)capmask >> (32 * k));
            d[k].effective = d[k].permitted = m;
            d[k].inheritable = no_raise ? 0 : m;
        }
        long r = sys6(NR_CAPSET, (long)&h, (long)d, 0, 0, 0, 0);
        if (r < 0)
            fail(F_CAPS, -r);
        for (long cap = 0; cap < 64 && !no_raise; cap++)
            if (capmask & (1L << cap))
                sys6(NR_PRCTL, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0, 0);
        struct cap_data back[2];
        struct cap_header h2 = { 0x20080522, 0 };
        if (sys6(NR_CAPGET, (long)&h2, (long)back, 0, 0, 0, 0) < 0)
            fail(F_CAPS, 0);
        for (int k = 0; k < 2; k++)
            if (back[k].effective != d[k].effective || back[k].permitted != d[k].permitted)
                fail(F_CAPS, EPERM);
    }

    if (gate >= 0) {
        char go = 0;
        long r;
        while ((r = sys6(NR_READ, gate, (long)&go, 1, 0, 0, 0)) == -4 /* EINTR */)
            ;
        if (r != 1)
            quit(125);
        sys6(NR_CLOSE, gate, 0, 0, 0, 0, 0);
    }

    if (exec_mode) {
        if (pty_sock >= 0) {
            long e = open_pty(pty_sock, pty_mask, pty_ws);
            if (e < 0)
                fail(F_PTY, -e);
        }
        long lr = set_rlimits();
        if (lr < 0)
            fail(F_RLIMIT, -lr);
        sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&oldset, 0, 8, 0, 0);
        for (int k = 0; k < nfilters; k++) {
            struct sock_fprog prog = { filter_len[k], filters[k] };
            long e = sys6(NR_PRCTL, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, (long)&prog, 0, 0, 0);
            if (e < 0)
                fail(F_SECCOMP, -e);
        }
        /* No SIGIO for the command once it is us (bwrap keeps a copy of the pipe's write
         * end; the launcher may close its reader first); one already pending is
         * delivered at the exec's unblock above: the launcher went before the exec. */
        sys6(NR_FCNTL, status_fd, F_SETFL, fl, 0, 0, 0);
        put(W_STARTED);   /* the status pipe is close-on-exec: the command never holds it */
        long e = sys6(NR_EXECVE, (long)exe, (long)cargv, (long)envp, 0, 0, 0);
        fail(F_EXEC, -e);
    }

    int epipe[2];
    long r = sys6(NR_PIPE2, (long)epipe, O_CLOEXEC, 0, 0, 0, 0);
    if (r < 0)
        fail(F_FORK, -r);
    /* Dumpable before the command's process exists, so its owner never finds us not yet
     * dumpable once the command runs; until the command's exec, after its Landlock
     * domain, only our code runs in the sandbox: from then on nothing of it can reach us. */
    if (landlock)
        sys6(NR_PRCTL, PR_SET_DUMPABLE, 1, 0, 0, 0, 0);
    long cmd = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (cmd < 0)
        fail(F_FORK, -cmd);
    if (cmd == 0) {
        /* The command: nothing of the init's reaches it (status pipe closed). */
        sys6(NR_CLOSE, status_fd, 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
        sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&oldset, 0, 8, 0, 0);
        long err = 0;
        if (pty_sock >= 0) {
            long e = open_pty(pty_sock, pty_mask, pty_ws);
            if (e < 0)
                err = (F_PTY << 16) | (-e & 0xffff);
        }
        if (landlock && err == 0) {
            long e = psb_landlock_self(landlock);
            if (e < 0)
                err = (F_LANDLOCK << 16) | (-e & 0xffff);
        }
        if (err == 0) {
            long e = set_rlimits();
            if (e < 0)
                err = (F_RLIMIT << 16) | (-e & 0xffff);
        }
        for (int k = 0; k < nfilters && err == 0; k++) {
            struct sock_fprog prog = { filter_len[k], filters[k] };
            long e = sys6(NR_PRCTL, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, (long)&prog, 0, 0, 0);
            if (e < 0)
                err = (F_SECCOMP << 16) | (-e & 0xffff);
        }
        if (err == 0) {
            long e = sys6(NR_EXECVE, (long)exe, (long)cargv, (long)envp, 0, 0, 0);
            err = (F_EXEC << 16) | (-e & 0xffff);
        }
        unsigned int w = (unsigned int)err;
        sys6(NR_WRITE, epipe[1], (long)&w, sizeof w, 0, 0, 0);
        for (;;)
            sys6(NR_EXIT, 127, 0, 0, 0, 0, 0);
    }
    sys6(NR_CLOSE, epipe[1], 0, 0, 0, 0, 0);
    if (pty_sock >= 0)
        sys6(NR_CLOSE, pty_sock, 0, 0, 0, 0, 0);   /* the init never sends on it */
    unsigned int err = 0;
    long got = 0;
    while ((r = sys6(NR_READ, epipe[0], (long)&err, sizeof err, 0, 0, 0)) == -4 /* EINTR */)
        ;
    got = r;
    sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
    if (got == sizeof err) {
        int st;
        sys6(NR_WAIT4, cmd, (long)&st, 0, 0, 0, 0);
        fail(err >> 16, err & 0xffff);
    }
    put(W_STARTED);

    psb_pid1_loop(cmd, status_fd, set & ~((1UL << (SIGCHLD - 1)) | (1UL << (SIGIO - 1))), 1);
}
