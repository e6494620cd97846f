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
 *   -S SOCK       the next -s program is loaded with a seccomp notification listener,
 *                 sent over unix socket SOCK (SCM_RIGHTS) and closed with SOCK in the
 *                 command's process: the launcher's denial observer
 *                 (Policy.report_denials, pysandbox/denials.py; native/psb_tail.h
 *                 psb_tail_seccomp_notify)
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
 *                 and close them and FD (native/psb_tail.h psb_tail_listen)
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
 *   FAILED, STEP, ERRNO, K    setup failed (the command never ran): STEP an enum
 *                             psb_tail_step (native/psb_tail.h), ERRNO, K which of the
 *                             step's options (the K-th -s, -R or -r; else 0)
 *   STATUS                    the command's raw wait status (after STARTED), then
 *                             the init exits with the command's code (128+N). */

#if defined(__x86_64__)
#include "psb_pid1.h"
#include "psb_tail.h"
PSB_START(psb_binit_main);

#define NR_READ __NR_read
#define NR_WRITE __NR_write
#define NR_CLOSE __NR_close
#define NR_POLL __NR_poll
#define NR_RT_SIGPROCMASK __NR_rt_sigprocmask
#define NR_FORK __NR_fork
#define NR_EXECVE __NR_execve
#define NR_EXIT __NR_exit
#define NR_WAIT4 __NR_wait4
#define NR_FCNTL __NR_fcntl
#define NR_CAPGET __NR_capget
#define NR_CAPSET __NR_capset
#define NR_PRCTL __NR_prctl
#define NR_MOUNT __NR_mount
#define NR_EXIT_GROUP __NR_exit_group
#define NR_NEWFSTATAT __NR_newfstatat
#define NR_STATFS __NR_statfs
#define NR_PIPE2 __NR_pipe2
#define NR_UNSHARE __NR_unshare
#define NR_IOCTL __NR_ioctl
#define NR_DUP2 __NR_dup2
#define NR_GETPID __NR_getpid
#define NR_SENDMSG __NR_sendmsg
#define NR_SETSID __NR_setsid
#define NR_GETSID __NR_getsid
#define NR_OPENAT __NR_openat
#define NR_PRLIMIT64 __NR_prlimit64
#define NR_SOCKET __NR_socket
#define NR_BIND __NR_bind
#define NR_LISTEN __NR_listen
#define NR_SETSOCKOPT __NR_setsockopt
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
#define MAX_RLIMITS 8

struct kstat {   /* x86_64 struct stat */
    unsigned long st_dev, st_ino, st_nlink;
    unsigned int st_mode, st_uid, st_gid, pad0;
    unsigned long st_rdev;
    long st_size, st_blksize, st_blocks;
    unsigned long times[6];
    long unused[3];
};
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

static long status_fd = -1;
static long notify_sock = -1;
static int notify_filter = -1;   /* which -s loads with the listener (-S) */
static unsigned long rlimits[MAX_RLIMITS][3];
static int nrlimits;

/* Runs in the command's process: the sandbox's rlimits, then its seccomp filters
 * (native/psb_tail.h). Returns 0, or the failed step (its errno in *err, which of its
 * options in *k). */
static unsigned int limit_and_filter(int nfilters, long *err, long *k)
{
    for (*k = 0; *k < nrlimits; (*k)++)
        if ((*err = -psb_tail_rlimit((long)rlimits[*k][0], rlimits[*k][1], rlimits[*k][2])) > 0)
            return PSB_TAIL_RLIMIT;
    for (*k = 0; *k < nfilters; (*k)++)
        if ((*err = -(*k == notify_filter ? psb_tail_seccomp_notify(filters[*k], filter_len[*k], notify_sock)
                                          : psb_tail_seccomp(filters[*k], filter_len[*k]))) > 0)
            return PSB_TAIL_SECCOMP;
    *k = 0;
    return 0;
}

/* Runs in the command's process: the sandbox's terminal (native/psb_tail.h); the slave
 * becomes descriptor n for each bit 1 << n of mask. Returns 0 or -errno. */
static long pty_to_stdio(long sock, long mask, long ws)
{
    long slave = psb_tail_pty(sock, (unsigned long)ws), r = slave;
    for (long fd = 0; r >= 0 && fd < 3; fd++)
        if (mask & (1L << fd))
            r = sys6(NR_DUP2, slave, fd, 0, 0, 0, 0);
    if (slave >= 0)
        sys6(NR_CLOSE, slave, 0, 0, 0, 0, 0);
    return r < 0 ? r : 0;
}

static void put(unsigned int word)
{
    sys6(NR_WRITE, status_fd, (long)&word, sizeof word, 0, 0, 0);
}

/* The failure record: step, errno, which of the step's options. */
static void __attribute__((noreturn)) fail(unsigned int step, long err, long k)
{
    unsigned int words[4] = { W_FAILED, step, (unsigned int)err, (unsigned int)k };
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
    long nro = 0, nbind = 0;
    for (; i < argc && !streq(argv[i], "--"); i++) {
        const char *o = argv[i];
        if (streq(o, "-N")) {
            long r = sys6(NR_UNSHARE, CLONE_NEWNS, 0, 0, 0, 0, 0);
            if (r < 0)
                fail(PSB_TAIL_MOUNT_PRIVATE, -r, 0);
        } else if (streq(o, "-P")) {
            long r = sys6(NR_MOUNT, 0, (long)"/", 0, MS_REC | MS_PRIVATE, 0, 0);
            if (r < 0)
                fail(PSB_TAIL_MOUNT_PRIVATE, -r, 0);
        } else if (streq(o, "-r") && i + 1 < argc) {
            const char *p = argv[++i];
            struct kstat st;
            long r = sys6(NR_NEWFSTATAT, AT_FDCWD, (long)p, (long)&st, AT_SYMLINK_NOFOLLOW, 0, 0);
            if (r == -ENOENT) {
                nro++;
                continue;
            }
            /* Already read-only (bwrap 0.8 covers sys, sysrq-trigger, irq and bus itself
             * where its setup could write them): one mount, as the native backend. struct
             * statfs on x86_64: f_flags is the eleventh long; ST_RDONLY is 1. */
            long sfs[15];
            if (r == 0 && sys6(NR_STATFS, (long)p, (long)sfs, 0, 0, 0, 0) == 0 && (sfs[10] & 1)) {
                nro++;
                continue;
            }
            if (r == 0)
                r = sys6(NR_MOUNT, (long)p, (long)p, 0, MS_BIND | MS_REC, 0, 0);
            if (r == 0)
                r = sys6(NR_MOUNT, 0, (long)p, 0, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                         0, 0);
            if (r < 0)
                fail(PSB_TAIL_PROC_READONLY, -r, nro);
            nro++;
        } else if (streq(o, "-b") && i + 3 < argc) {
            const char *p = argv[i + 1];
            long dev = parse(argv[i + 2]), ino = parse(argv[i + 3]);
            struct kstat st;
            long r = sys6(NR_NEWFSTATAT, AT_FDCWD, (long)p, (long)&st, AT_SYMLINK_NOFOLLOW, 0, 0);
            /* EACCES: a parent bwrap made (0700, owned by the setup's uid) keeps this uid
             * out; the command, with this uid and no capabilities, cannot reach the bind
             * either, so whatever is bound there is out of its reach too. */
            if (r != -EACCES && (r < 0 || (long)st.st_dev != dev || (long)st.st_ino != ino))
                fail(PSB_TAIL_BIND_CHANGED, r < 0 ? -r : 40 /* ELOOP */, nbind);
            nbind++;
            i += 3;
        } else if (streq(o, "-s") && i + 1 < argc) {
            if (nfilters >= MAX_FILTERS)
                fail(PSB_TAIL_SECCOMP, 7 /* E2BIG */, nfilters);
            long fd = parse(argv[++i]);
            long got = 0, r;
            while (got <= FILTER_BYTES &&
                   (r = sys6(NR_READ, fd, (long)(filters[nfilters] + got), FILTER_BYTES + 8 - got, 0, 0, 0)) > 0)
                got += r;
            if (fd < 0 || got <= 0 || got % 8 != 0 || got > FILTER_BYTES)
                fail(PSB_TAIL_SECCOMP, EINVAL, nfilters);
            sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
            filter_len[nfilters++] = (unsigned short)(got / 8);
        } else if (streq(o, "-S") && i + 1 < argc) {
            notify_sock = parse(argv[++i]);
            if (notify_sock < 3 || notify_filter >= 0)
                fail(PSB_TAIL_USAGE, EINVAL, i);
            notify_filter = nfilters;
            sys6(NR_FCNTL, notify_sock, F_SETFD, FD_CLOEXEC, 0, 0, 0);
        } else if (streq(o, "-t") && i + 3 < argc) {
            pty_sock = parse(argv[i + 1]);
            pty_mask = parse(argv[i + 2]);
            pty_ws = parse(argv[i + 3]);
            if (pty_sock < 3 || pty_mask < 0 || pty_ws < 0)
                fail(PSB_TAIL_USAGE, EINVAL, i);
            sys6(NR_FCNTL, pty_sock, F_SETFD, FD_CLOEXEC, 0, 0, 0);
            i += 3;
        } else if (streq(o, "-R") && i + 3 < argc) {
            long res = parse(argv[i + 1]), soft = parse(argv[i + 2]), hard = parse(argv[i + 3]);
            if (nrlimits >= MAX_RLIMITS || res < 0 || soft < 0 || hard < 0)
                fail(PSB_TAIL_USAGE, EINVAL, i);
            rlimits[nrlimits][0] = (unsigned long)res;
            rlimits[nrlimits][1] = (unsigned long)soft;
            rlimits[nrlimits][2] = (unsigned long)hard;
            nrlimits++;
            i += 3;
        } else if (streq(o, "-p") && i + 2 < argc) {
            long sock = parse(argv[i + 1]), port = parse(argv[i + 2]);
            if (sock < 3 || port < 0)   /* a port out of range is the tail's EINVAL */
                fail(PSB_TAIL_USAGE, EINVAL, i);
            long e = psb_tail_listen(sock, port);
            if (e < 0)
                fail(PSB_TAIL_LISTEN, -e, 0);
            i += 2;
        } else if (streq(o, "-w") && i + 1 < argc) {
            gate = parse(argv[++i]);
            if (gate < 3)
                fail(PSB_TAIL_USAGE, EINVAL, i);
            sys6(NR_FCNTL, gate, F_SETFD, FD_CLOEXEC, 0, 0, 0);
        } else if (streq(o, "-x")) {
            exec_mode = 1;
        } else if (streq(o, "-n")) {
            no_raise = 1;
        } else if (streq(o, "-L") && i + 1 < argc) {
            landlock = parse(argv[++i]);   /* a kind psb_landlock_self does not know: its EINVAL */
            if (landlock <= 0)
                fail(PSB_TAIL_USAGE, EINVAL, i);
        } else if (streq(o, "-c") && i + 1 < argc) {
            capmask = parse_hex(argv[++i]);
            if (capmask < 0)
                fail(PSB_TAIL_USAGE, EINVAL, i);
        } else {
            fail(PSB_TAIL_USAGE, EINVAL, i);
        }
    }
    if (i + 2 >= argc)
        fail(PSB_TAIL_USAGE, EINVAL, i);
    char *exe = argv[i + 1];
    char **cargv = argv + i + 2;

    if (capmask >= 0) {
        long e = psb_tail_caps((unsigned long)capmask, 63, no_raise, 0);
        if (e < 0)
            fail(PSB_TAIL_CAPS, -e, 0);
    }
    if (gate >= 0 && psb_tail_gate(gate) < 0)
        quit(125);

    long err = 0, k = 0;
    unsigned int step;
    if (exec_mode) {
        if (pty_sock >= 0 && (err = -pty_to_stdio(pty_sock, pty_mask, pty_ws)) > 0)
            fail(PSB_TAIL_PTY, err, 0);
        /* The signal mask as the command's; a SIGIO already pending (the launcher went)
         * ends us here, before anything of the command runs. */
        sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&oldset, 0, 8, 0, 0);
        if ((step = limit_and_filter(nfilters, &err, &k)) != 0)
            fail(step, err, k);
        /* No SIGIO for the command once it is us (bwrap keeps a copy of the pipe's write
         * end; the launcher may close its reader first); one already pending is
         * delivered at the exec's unblock above: the launcher went before the exec. */
        sys6(NR_FCNTL, status_fd, F_SETFL, fl, 0, 0, 0);
        put(W_STARTED);   /* the status pipe is close-on-exec: the command never holds it */
        fail(PSB_TAIL_EXEC, -psb_tail_exec(exe, 1, 0, cargv, envp), 0);
    }

    int epipe[2];
    long r = sys6(NR_PIPE2, (long)epipe, O_CLOEXEC, 0, 0, 0, 0);
    if (r < 0)
        fail(PSB_TAIL_FORK, -r, 0);
    /* Dumpable before the command's process exists, so its owner never finds us not yet
     * dumpable once the command runs; until the command's exec, after its Landlock
     * domain, only our code runs in the sandbox: from then on nothing of it can reach us. */
    if (landlock)
        sys6(NR_PRCTL, PR_SET_DUMPABLE, 1, 0, 0, 0, 0);
    long cmd = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (cmd < 0)
        fail(PSB_TAIL_FORK, -cmd, 0);
    if (cmd == 0) {
        /* The command: nothing of the init's reaches it (status pipe closed). */
        sys6(NR_CLOSE, status_fd, 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
        /* The tail, in this order: terminal, Landlock, rlimits, seccomp, exec. Signals
         * stay blocked through the terminal: a pty whose master could not be handed over
         * is hung up when we close the master, and its SIGHUP must not kill us before
         * the failure is reported (it stays pending; we exit). */
        step = 0;
        if (pty_sock >= 0 && (err = -pty_to_stdio(pty_sock, pty_mask, pty_ws)) > 0)
            step = PSB_TAIL_PTY;
        if (!step && landlock && (err = -psb_landlock_self(landlock)) > 0)
            step = PSB_TAIL_LANDLOCK;
        if (!step)
            sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&oldset, 0, 8, 0, 0);
        if (!step)
            step = limit_and_filter(nfilters, &err, &k);
        if (!step) {
            err = -psb_tail_exec(exe, 1, 0, cargv, envp);
            step = PSB_TAIL_EXEC;
        }
        unsigned int rec[3] = { step, (unsigned int)err, (unsigned int)k };
        sys6(NR_WRITE, epipe[1], (long)rec, sizeof rec, 0, 0, 0);
        for (;;)
            sys6(NR_EXIT, 127, 0, 0, 0, 0, 0);
    }
    sys6(NR_CLOSE, epipe[1], 0, 0, 0, 0, 0);
    if (pty_sock >= 0)
        sys6(NR_CLOSE, pty_sock, 0, 0, 0, 0, 0);   /* the init never sends on it */
    if (notify_sock >= 0)
        sys6(NR_CLOSE, notify_sock, 0, 0, 0, 0, 0);
    unsigned int rec[3];
    while ((r = sys6(NR_READ, epipe[0], (long)rec, sizeof rec, 0, 0, 0)) == -4 /* EINTR */)
        ;
    sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
    if (r == sizeof rec) {
        int st;
        sys6(NR_WAIT4, cmd, (long)&st, 0, 0, 0, 0);
        fail(rec[0], rec[1], rec[2]);
    }
    put(W_STARTED);

    psb_pid1_loop(cmd, status_fd, set & ~((1UL << (SIGCHLD - 1)) | (1UL << (SIGIO - 1))), 1);
}
