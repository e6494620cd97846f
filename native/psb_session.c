/* The session server: a freestanding static program (no libc) that a session's sandbox
 * runs as its pid 1, on both backends, after the sandbox's whole setup (capabilities
 * dropped, no_new_privs, seccomp): it holds no more privilege than the commands it
 * starts. build_native.py embeds it in pysandbox._native; pysandbox/session.py puts it in
 * a sealed, execute-only memfd (exec of an unreadable file: undumpable from the first
 * instruction) and launches it through /proc/self/fd/N.
 *
 * argv: psb-session CHANNEL_FD SELF_FD [-L KIND [PATH...]]. CHANNEL_FD is the server's end of a unix stream
 * socketpair with the launcher, the only descriptor it keeps (close-on-exec; SELF_FD,
 * the memfd, is closed) but, with -L, O_PATH ones of "/" and of each writable PATH
 * (close-on-exec, never a command's: landlock_kind below). The protocol (pysandbox/session_proto.py is the other side):
 *
 *   launcher -> server: a frame of 8 little-endian u32 words
 *     MAGIC TYPE ID A B C D PAYLOAD_LEN, then PAYLOAD_LEN bytes; descriptors ride as
 *     SCM_RIGHTS on the frame's first bytes (received close-on-exec)
 *     SPAWN  (1): A candidates, B argv strings, C env strings, D descriptors;
 *                 payload: D u32 target numbers, then NUL-terminated strings:
 *                 cwd, the exec candidates, argv, env
 *     SPAWN_QUIET (4): as SPAWN, but the launcher gets no STARTED (it waits for the
 *                 command's end only: run); FAILED and EXITED as for SPAWN
 *     SIGNAL (2): A the signal, sent to the command's process
 *     LIMITS (3): the next SPAWN's rlimits (native/psb_session_limits.h)
 *   server -> launcher: events of 4 u32 words TYPE ID A B
 *     READY (0x10); STARTED (0x11, A = the command's pid in the sandbox);
 *     FAILED (0x12, A = errno, B = the step: enum psb_tail_step, native/psb_tail.h;
 *             for PSB_TAIL_RLIMIT the failed rlimit's index in bits 16 and up);
 *     EXITED (0x13, A = raw wait status); ERROR (0x14, A = code) and the server exits.
 *
 * Signals for a command go through its keeper (SIG_RELAY), which alone can know the
 * command is not yet reaped. A command's STARTED, FAILED and EXITED come from its keeper,
 * which writes them to the server (a pipe: its state) and to the channel itself (no
 * relay), the server's copy first but EXITED's; the server repeats one the keeper may
 * have died before sending, so the launcher ignores a STARTED for a command that has its
 * pid and any event for an id it no longer waits for.
 *
 * Per command: a keeper, a child subreaper that dies with the server: the armed one (see
 * arm below: forked while no command runs, handed the SPAWN whole), or one the server
 * forks for it;
 * the keeper starts the command with vfork semantics (clone CLONE_VM|CLONE_VFORK on a
 * stack of its own: no copy of page tables; the keeper sleeps until the exec or the
 * exit, and a setup error comes back in its memory) (new session, die-with-keeper, the frame's descriptors
 * on their targets and nothing else, signals unblocked, chdir, exec of the candidates
 * in order, as execvp). When the command ends, the keeper SIGKILLs every process left
 * in its subtree (orphans reparent to it, setsid or not), reaps them, and only then
 * reports EXITED: a command's background processes end with it. A keeper that dies
 * early is reported as SIGKILL once the server, pid 1, has killed and reaped every
 * child of its own that is not a live keeper (the orphans it inherited) and all their
 * descendants. The launcher's SIGKILL for a command is not relayed: the server
 * SIGKILLs the keeper itself (ending a command never depends on a keeper the command
 * could have stopped or traced; on kernels with Landlock's signal scope it cannot:
 * -L 2, pysandbox/backends/landlock.py), and the same path ends the tree.
 * EOF on the channel: the server exits, and the kernel kills the whole namespace. */

#if defined(__x86_64__)
#include "psb_tail.h"
#include "psb_session_limits.h"
PSB_START(psb_session_main);

#define NR_READ __NR_read
#define NR_WRITE __NR_write
#define NR_OPEN __NR_open
#define NR_CLOSE __NR_close
#define NR_POLL __NR_poll
#define NR_RT_SIGPROCMASK __NR_rt_sigprocmask
#define NR_RT_SIGTIMEDWAIT __NR_rt_sigtimedwait
#define NR_RT_SIGQUEUEINFO __NR_rt_sigqueueinfo
#define NR_DUP2 __NR_dup2
#define NR_GETPID __NR_getpid
#define NR_RECVMSG __NR_recvmsg
#define NR_FORK __NR_fork
#define NR_EXECVE __NR_execve
#define NR_EXIT __NR_exit
#define NR_WAIT4 __NR_wait4
#define NR_KILL __NR_kill
#define NR_FCNTL __NR_fcntl
#define NR_CHDIR __NR_chdir
#define NR_SETSID __NR_setsid
#define NR_PRCTL __NR_prctl
#define NR_EXIT_GROUP __NR_exit_group
#define NR_SIGNALFD4 __NR_signalfd4
#define NR_PIPE2 __NR_pipe2
#define NR_CLOSE_RANGE __NR_close_range
#define NR_PTRACE __NR_ptrace
#define NR_SOCKETPAIR __NR_socketpair
#define NR_SENDMSG __NR_sendmsg
#define PTRACE_DETACH 17
#else
#error "psb_session: unsupported architecture"
#endif

#define SIGKILL 9
#define SIGCHLD 17
#define SIG_RELAY 40   /* server -> keeper: "send the command si_int" (rt: queued, with a value) */
#define PR_SET_PDEATHSIG 1
#define PR_SET_DUMPABLE 4
#define PR_SET_CHILD_SUBREAPER 36
#define F_DUPFD_CLOEXEC 1030
#define F_SETFD 2
#define FD_CLOEXEC 1
#define O_CLOEXEC 02000000
#define O_NONBLOCK 04000
#define POLLIN 1
#define WNOHANG 1
#define WALL 0x40000000   /* __WALL: a child made by clone() with another exit signal too */
#define EINTR 4
#define EAGAIN 11
#define ECHILD 10
#define MSG_CMSG_CLOEXEC 0x40000000
#define MSG_DONTWAIT 0x40
#define MSG_NOSIGNAL 0x4000
#define SOCK_STREAM 1

#define MAGIC 0x50534253u
#define T_SPAWN 1
#define T_SIGNAL 2
#define T_SPAWN_QUIET 4   /* as SPAWN, but no STARTED to the launcher (run(): it waits for the end only) */
#define E_READY 0x10
#define E_STARTED 0x11
#define E_FAILED 0x12
#define E_EXITED 0x13
#define E_ERROR 0x14

#define MAX_CMDS 256
#define MAX_FDS 64
#define MAX_PAYLOAD (8u << 20)
#define MAX_STRINGS 65536

struct iovec { void *base; unsigned long len; };
struct msghdr {
    void *name; unsigned int namelen; struct iovec *iov; unsigned long iovlen;
    void *control; unsigned long controllen; int flags;
};
struct cmsghdr { unsigned long len; int level, type; };
struct pollfd { int fd; short events, revents; };

/* last: the keeper's last event (it went to the launcher straight from the keeper too);
 * killed: the server SIGKILLed this keeper (it may have died between its two writes). */
struct cmd { unsigned int id; long keeper, pid; int rep; int exited; int killed; unsigned int last[4]; };

static struct cmd cmds[MAX_CMDS];
static struct pollfd pfds[MAX_CMDS + 2];
static char payload[MAX_PAYLOAD + 1];
static char *strs[MAX_STRINGS + 3];
static long chan = -1, sigfd = -1;
/* "-L KIND [PATH...]": each command's Landlock domain (native/psb_landlock.h; 2 signal
 * scope for a command that may mount, 3 with the filesystem rules too for one that
 * cannot, wherever the kernel has the scope, else 1 filesystem rules for a command that
 * cannot mount); the PATHs: the writable destinations its write rules go beneath
 * (pysandbox/backends/landlock.py writable_destinations), opened once, before any
 * command, and kept (psb_landlock_keep: "/" first, then each writable mount's root), so
 * each command adds one rule per descriptor and walks no path. Without it, none
 * (pysandbox/backends/landlock.py decides: a command that may mount, on a kernel without
 * Landlock's signal scope; or no Landlock at all). */
#define MAX_KEPT 4096
static long landlock_kind;
static int ll_kept[MAX_KEPT];
static long ll_nkept;

static void put_event(long fd, unsigned int type, unsigned int id, unsigned int a, unsigned int b)
{
    unsigned int ev[4] = { type, id, a, b };
    const char *p = (const char *)ev;
    long left = sizeof ev;
    while (left > 0) {
        long r = sys6(NR_WRITE, fd, (long)p, left, 0, 0, 0);
        if (r == -EINTR)
            continue;
        if (r <= 0)
            quit(0);   /* the launcher is gone: exiting ends the namespace */
        p += r, left -= r;
    }
}

static int read_full(long fd, char *p, unsigned long n)
{
    while (n > 0) {
        long r = sys6(NR_READ, fd, (long)p, (long)n, 0, 0, 0);
        if (r == -EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, n -= (unsigned long)r;
    }
    return 0;
}

/* "12 34 " -> the pids, up to max; the count. */
static int read_pids(const char *path, long *out, int max)
{
    char buf[4096];
    long fd = sys6(NR_OPEN, (long)path, O_CLOEXEC, 0, 0, 0, 0);
    if (fd < 0)
        return -1;
    long got = 0, r;
    while (got < (long)sizeof buf - 1 && (r = sys6(NR_READ, fd, (long)(buf + got), (long)sizeof buf - 1 - got,
                                                   0, 0, 0)) > 0)
        got += r;
    sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
    int n = 0;
    long v = -1;
    for (long i = 0; i < got && n < max; i++) {
        if (buf[i] >= '0' && buf[i] <= '9')
            v = (v < 0 ? 0 : v * 10) + (buf[i] - '0');
        else if (v >= 0)
            out[n++] = v, v = -1;
    }
    return n;
}

static void children_path(char *out, long pid)
{
    /* /proc/PID/task/PID/children */
    const char *a = "/proc/", *b = "/task/", *c = "/children";
    char *o = out;
    while (*a)
        *o++ = *a++;
    o += psb_utoa(o, (unsigned long)pid);
    while (*b)
        *o++ = *b++;
    o += psb_utoa(o, (unsigned long)pid);
    while (*c)
        *o++ = *c++;
    *o = 0;
}

/* SIGKILL every process below `self`, each before its own children are read (a
 * process with a SIGKILL pending can fork no more). Processes reparented to `self`
 * while this runs are found by the caller's next round. */
static void kill_subtree(long self)
{
    static long stack[8192];
    char path[96];
    children_path(path, self);
    int n = read_pids(path, stack, 8192);
    while (n > 0) {
        long pid = stack[--n];
        sys6(NR_KILL, pid, SIGKILL, 0, 0, 0, 0);
        children_path(path, pid);
        int more = read_pids(path, stack + n, 8192 - n);
        if (more > 0)
            n += more;
    }
}

/* The command's setup failure, written by the command's process (a CLONE_VM|CLONE_VFORK
 * child: the keeper's memory until exec) before it exits; read by the keeper once
 * vfork returns. step 0: the exec succeeded. */
static volatile unsigned int cmd_err[2];

struct cmd_args { unsigned int ncand, nargv; int nfds; const unsigned int *targets; const long *fds; };

static void __attribute__((noreturn)) cmd_fail(unsigned int err, unsigned int step)
{
    cmd_err[0] = err, cmd_err[1] = step;
    for (;;)
        sys6(NR_EXIT, 127, 0, 0, 0, 0, 0);
}

/* Runs on its own stack in the keeper's memory (vfork_call): writes only its own
 * locals and cmd_err; the keeper's fds stay as they were. */
static void __attribute__((noreturn, used)) command(struct cmd_args *a)
{
    unsigned int ncand = a->ncand, nargv = a->nargv;
    int nfds = a->nfds;
    const unsigned int *targets = a->targets;
    long fds[MAX_FDS];
    unsigned long none = 0;
    sys6(NR_SETSID, 0, 0, 0, 0, 0, 0);
    sys6(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    long cg = session_limits_enter();   /* native/psb_session_limits.h */
    if (cg < 0)
        cmd_fail((unsigned int)-cg, PSB_TAIL_CGROUP);
    /* A Landlock domain of its own (native/psb_landlock.h): nothing it starts can reach
     * us, the keepers or the server, whatever capabilities the policy leaves it. No
     * domain: as before (the server and keepers are undumpable). Built here, while the
     * server's kept descriptors are still open in this process (its rules: one per
     * descriptor, no path walk) and the ones it is given are the received ones; placing
     * them below closes the kept ones. Fail closed on any error, as the one-shot launch
     * does: the kind was asked for because the kernel has it (pysandbox/backends/landlock.py). */
    long r = landlock_kind ? psb_landlock_kept(landlock_kind, ll_kept, ll_nkept, a->fds, nfds) : 0;
    if (r < 0)
        cmd_fail((unsigned int)-r, PSB_TAIL_LANDLOCK);
    /* Every received descriptor above every target, then onto its target; then nothing
     * else stays open (the server's kept descriptors neither). */
    long maxt = 2;
    for (int k = 0; k < nfds; k++)
        if ((long)targets[k] > maxt)
            maxt = targets[k];
    for (int k = 0; k < nfds; k++) {
        long hi = sys6(NR_FCNTL, a->fds[k], F_DUPFD_CLOEXEC, maxt + 1, 0, 0, 0);
        if (hi < 0)
            cmd_fail(9 /* EBADF */, PSB_TAIL_FDS);
        fds[k] = hi;
    }
    for (int k = 0; k < nfds; k++)
        if (sys6(NR_DUP2, fds[k], targets[k], 0, 0, 0, 0) < 0)
            cmd_fail(9, PSB_TAIL_FDS);
    for (long fd = 0; fd <= maxt; fd++) {
        int keep = 0;
        for (int k = 0; k < nfds; k++)
            keep |= (long)targets[k] == fd;
        if (!keep)
            sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
    }
    sys6(NR_CLOSE_RANGE, maxt + 1, ~0U, 0, 0, 0, 0);
    sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)&none, 0, 8, 0, 0);
    unsigned int rl_index = 0;
    r = session_limits_apply(&rl_index);   /* native/psb_session_limits.h */
    if (r < 0)
        cmd_fail((unsigned int)-r, PSB_TAIL_RLIMIT | rl_index << 16);
    r = sys6(NR_CHDIR, (long)strs[0], 0, 0, 0, 0, 0);
    if (r < 0)
        cmd_fail((unsigned int)-r, PSB_TAIL_CHDIR);
    char **argv = strs + 1 + ncand, **envp = strs + 1 + ncand + nargv + 1;
    /* The candidates, back to back in the payload, tried as the one-shot launch does
     * (native/psb_tail.h psb_tail_exec). A name with a '/' (pysandbox/execpath.py: not
     * searched) reports its own error. */
    int searched = 1;
    for (const char *c = argv[0]; *c; c++)
        if (*c == '/')
            searched = 0;
    cmd_fail((unsigned int)-psb_tail_exec(strs[1], ncand, searched, argv, envp), PSB_TAIL_EXEC);
}

/* clone(CLONE_VM|CLONE_VFORK|SIGCHLD) with the child on `stack_top`, calling fn(arg)
 * there (it never returns): the keeper sleeps until the command's exec or exit,
 * without copying its page tables (posix_spawn's way). The child's registers are the
 * parent's but rax and rsp, so fn and arg ride in r12/r13. */
#define CLONE_VM 0x100
#define CLONE_VFORK 0x4000
static long vfork_call(void (*fn)(struct cmd_args *), struct cmd_args *arg, void *stack_top)
{
    long ret;
    register long r10 __asm__("r10") = 0;
    register long r8 __asm__("r8") = 0;
    register void *r12 __asm__("r12") = (void *)fn;
    register void *r13 __asm__("r13") = arg;
    __asm__ volatile("syscall\n\t"
                     "test %%rax, %%rax\n\t"
                     "jnz 1f\n\t"
                     "xor %%ebp, %%ebp\n\t"
                     "mov %%r13, %%rdi\n\t"
                     "call *%%r12\n\t"
                     "hlt\n"
                     "1:"
                     : "=a"(ret)
                     : "0"((long)__NR_clone), "D"((long)(CLONE_VM | CLONE_VFORK | SIGCHLD)), "S"(stack_top),
                       "d"(0L), "r"(r10), "r"(r8), "r"(r12), "r"(r13)
                     : "rcx", "r11", "memory");
    return ret;
}

static char cmd_stack[256 * 1024] __attribute__((aligned(16)));

/* An event to the launcher, straight (chan: no relay through the server) and to the
 * server (rep: its state for SIGNAL and for a keeper that dies early), the server's
 * first: once the launcher has it, the server has it too. */
static void keeper_event(long rep, unsigned int type, unsigned int id, unsigned int a, unsigned int b)
{
    put_event(rep, type, id, a, b);
    put_event(chan, type, id, a, b);
}

/* A keeper's first steps, in the child of the server's fork: it dies with the server
 * and its command's orphans come to it. */
static void keeper_init(void)
{
    sys6(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    sys6(NR_PRCTL, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0, 0);
}

static void __attribute__((noreturn)) keeper(unsigned int id, long rep, unsigned int ncand, unsigned int nargv,
                                            int nfds, const unsigned int *targets, long *fds, int quiet)
{
    long self = sys6(NR_GETPID, 0, 0, 0, 0, 0, 0);
    struct cmd_args args = { ncand, nargv, nfds, targets, fds };
    cmd_err[0] = cmd_err[1] = 0;
    long pid = vfork_call(command, &args, cmd_stack + sizeof cmd_stack);
    for (int k = 0; k < nfds; k++)
        sys6(NR_CLOSE, fds[k], 0, 0, 0, 0, 0);
    for (long k = 0; k < ll_nkept; k++)   /* the command's are its own copies: no use to a keeper */
        sys6(NR_CLOSE, ll_kept[k], 0, 0, 0, 0, 0);
    session_limits_forked();   /* the command's cgroup descriptors are its own only */
    if (pid < 0) {
        keeper_event(rep, E_FAILED, id, (unsigned int)-pid, PSB_TAIL_FORK);
        quit(0);
    }
    int st = 0, cst = 0;
    if (cmd_err[1]) {
        sys6(NR_WAIT4, pid, (long)&st, 0, 0, 0, 0);
        keeper_event(rep, E_FAILED, id, cmd_err[0], cmd_err[1]);
        quit(0);
    }
    if (quiet)
        put_event(rep, E_STARTED, id, (unsigned int)pid, 0);   /* the server's state only */
    else
        keeper_event(rep, E_STARTED, id, (unsigned int)pid, 0);
    /* Until the command is reaped its pid cannot be reused, so only the keeper signals
     * it: the server relays a signal as SIG_RELAY with the number in si_int. */
    unsigned long set = (1UL << (SIGCHLD - 1)) | (1UL << (SIG_RELAY - 1));
    int none_left = 0;
    for (int alive = 1; alive;) {
        long r;
        while ((r = sys6(NR_WAIT4, -1, (long)&st, WNOHANG | WALL, 0, 0, 0)) > 0) {
            if ((st & 0xff) == 0x7f)   /* a ptrace stop (PTRACE_TRACEME), not an exit */
                sys6(NR_PTRACE, PTRACE_DETACH, r, 0, (st >> 8) & 0xff, 0, 0);
            else if (r == pid)
                cst = st, alive = 0;
        }
        if (r == -ECHILD)
            alive = 0, none_left = 1;
        if (!alive)
            break;
        int info[32];
        long sig = sys6(NR_RT_SIGTIMEDWAIT, (long)&set, (long)info, 0, 8, 0, 0);
        if (sig == SIG_RELAY && info[6] > 0 && info[6] < 65)
            sys6(NR_KILL, pid, info[6], 0, 0, 0, 0);
    }
    /* The command is gone: so is everything it left behind. ECHILD above (__WALL: any
     * child at all) means nothing is: every orphan of the command's tree is reparented
     * to us (subreaper) before its parent can be reaped, so a descendant alive would be
     * a child of ours, or below one. */
    while (!none_left) {
        kill_subtree(self);
        long r = sys6(NR_WAIT4, -1, (long)&st, 0, 0, 0, 0);
        if (r == -ECHILD)
            break;
    }
    /* The launcher first: its wait ends while the server takes its copy (state it needs
     * only for a later SIGNAL of this id, which the launcher no longer sends; a SIGKILL
     * between the two writes is the server's to repeat: report). */
    put_event(chan, E_EXITED, id, (unsigned int)cst, 0);
    put_event(rep, E_EXITED, id, (unsigned int)cst, 0);
    quit(0);
}

static int find(unsigned int id)
{
    for (int k = 0; k < MAX_CMDS; k++)
        if (cmds[k].rep >= 0 && cmds[k].id == id)
            return k;
    return -1;
}

/* The next command's keeper, forked while the server waits (arm): set up, with the pages
 * a command's start writes already its own, it waits on a socketpair of its own (sock,
 * the server's end) for one SPAWN, which the server hands it whole (dispatch): a
 * command's start costs the server a sendmsg, not a fork, and the keeper no set-up. Its
 * report pipe (rep) becomes the command's once dispatched. A frame that does not fit
 * the socket at once (a payload of hundreds of KiB), or an armed keeper gone (killed by
 * a command, on kernels without Landlock's signal scope), and the SPAWN takes the fork
 * path instead: the server never waits on an armed keeper. */
static struct { long pid, sock; int rep; } armed = { 0, -1, -1 };
/* Armed keepers that died before a SPAWN came (killed by a command, or the session's
 * memory limit): after ARM_LOST_MAX, no more are armed (the fork path), so nothing can
 * make the server fork in a loop. */
#define ARM_LOST_MAX 3
static int arm_lost;

/* What the keeper needs of the server's state, beside the frame: the rlimits its command
 * takes (psb_session_limits.h; the cgroup descriptors ride after the frame's). */
struct dispatch_msg { unsigned int h[8]; unsigned int nrl, pad; unsigned long rl[SESSION_MAX_RLIMITS][3]; };

#define PREFAULT (64u << 10)

static void disarm(int kill)
{
    if (kill && armed.pid > 0)
        sys6(NR_KILL, armed.pid, SIGKILL, 0, 0, 0, 0);
    if (armed.sock >= 0)
        sys6(NR_CLOSE, armed.sock, 0, 0, 0, 0, 0);
    if (armed.rep >= 0)
        sys6(NR_CLOSE, armed.rep, 0, 0, 0, 0, 0);
    armed.pid = 0, armed.sock = -1, armed.rep = -1;
}

/* In a keeper (either path), right after the fork: the server's descriptors go, from
 * its table (not the poll array, whose entries may name descriptors closed and reused
 * since the poll), but the channel (the keeper reports to the launcher itself:
 * keeper_event) and the Landlock rules' kept ones. */
static void keeper_fds(void)
{
    sys6(NR_CLOSE, sigfd, 0, 0, 0, 0, 0);
    for (int j = 0; j < MAX_CMDS; j++)
        if (cmds[j].rep >= 0)
            sys6(NR_CLOSE, cmds[j].rep, 0, 0, 0, 0, 0);
    if (armed.sock >= 0)
        sys6(NR_CLOSE, armed.sock, 0, 0, 0, 0, 0);
    if (armed.rep >= 0)
        sys6(NR_CLOSE, armed.rep, 0, 0, 0, 0, 0);
    session_limits_drop(next_cg, &next_cg_n);   /* a LIMITS frame held for a later SPAWN */
}

/* The frame's strings, from the payload (after `off` bytes of targets): strs holds cwd,
 * the candidates, argv, NULL, env, NULL. 0, or -1: malformed. */
static int frame_strings(const unsigned int *h, unsigned long off)
{
    unsigned int ncand = h[3], nargv = h[4], nenv = h[5], len = h[7];
    unsigned int want = 1 + ncand + nargv + nenv, got = 0;
    if (want > MAX_STRINGS || ncand == 0 || nargv == 0 || off > len)
        return -1;
    payload[len] = 0;
    for (unsigned long p = off; p < len && got < want; got++) {
        strs[got + (got >= 1 + ncand + nargv)] = payload + p;   /* argv's NULL sits between */
        while (p < len && payload[p])
            p++;
        p++;
    }
    if (got != want)
        return -1;
    strs[1 + ncand + nargv] = 0;
    strs[1 + ncand + nargv + 1 + nenv] = 0;
    return 0;
}

/* The stack a keeper's start uses below this frame, touched now (copy-on-write after the
 * fork: a fault each page on first write). */
static void __attribute__((noinline)) touch_stack(void)
{
    volatile char pad[32 << 10];
    for (unsigned long i = 0; i < sizeof pad; i += 4096)
        pad[i] = 0;
}

static void __attribute__((noreturn)) armed_keeper(long rep, long sock)
{
    keeper_init();
    /* Touched now, while the server waits: the pages a command's start writes (the frame's
     * buffers, the command's stack, the state the keeper and command share) are ours before
     * it comes. */
    for (unsigned long i = 0; i < PREFAULT; i += 4096) {
        ((volatile char *)payload)[i] = 0;
        ((volatile char *)cmd_stack)[sizeof cmd_stack - 1 - i] = 0;
    }
    ((volatile char **)strs)[0] = 0;
    cmd_err[0] = cmd_err[1] = 0;
    cur_rl_n = 0, cur_cg_n = 0, next_rl[0][0] = 0;
    touch_stack();
    struct dispatch_msg msg;
    unsigned long control[(16 + (MAX_FDS + SESSION_MAX_CGROUPS) * 4 + 16) / 8];
    /* The frame and its payload at once (the server sent them in one sendmsg and sends
     * nothing after): read_full only for what a large frame leaves. */
    struct iovec iov[2] = { { &msg, sizeof msg }, { payload, MAX_PAYLOAD } };
    struct msghdr m = { 0, 0, iov, 2, control, sizeof control, 0 };
    long r;
    while ((r = sys6(NR_RECVMSG, sock, (long)&m, MSG_CMSG_CLOEXEC, 0, 0, 0)) == -EINTR)
        ;
    if (r <= 0)
        quit(0);   /* the server disarmed us, or is gone */
    int all[MAX_FDS + SESSION_MAX_CGROUPS], nall = 0;
    struct cmsghdr *c = (struct cmsghdr *)control;
    if (m.controllen >= sizeof *c && c->level == 1 /* SOL_SOCKET */ && c->type == 1 /* SCM_RIGHTS */) {
        int *p = (int *)(c + 1);
        for (unsigned long k = 0; k < (c->len - sizeof *c) / 4 && nall < MAX_FDS + SESSION_MAX_CGROUPS; k++)
            all[nall++] = p[k];
    }
    const unsigned int *h = msg.h;
    if (r < (long)sizeof msg && read_full(sock, (char *)&msg + r, sizeof msg - (unsigned long)r) < 0)
        quit(0);   /* the server's whole frame, or nothing: it took the fork path */
    unsigned long have = r > (long)sizeof msg ? (unsigned long)r - sizeof msg : 0;
    if (h[7] > MAX_PAYLOAD || have > h[7] || read_full(sock, payload + have, h[7] - have) < 0)
        quit(0);
    sys6(NR_CLOSE, sock, 0, 0, 0, 0, 0);
    int nfds = (int)(h[6] & ~SPAWN_LIMITED);
    long fds[MAX_FDS];
    if (nfds > MAX_FDS || nfds > nall || nall - nfds > SESSION_MAX_CGROUPS || msg.nrl > SESSION_MAX_RLIMITS ||
        frame_strings(h, (unsigned long)nfds * 4) < 0) {
        keeper_event(rep, E_FAILED, h[2], 22 /* EINVAL */, PSB_TAIL_USAGE);
        quit(0);
    }
    for (int k = 0; k < nfds; k++)
        fds[k] = all[k];
    for (int k = nfds; k < nall; k++)
        cur_cg[cur_cg_n++] = all[k];
    for (unsigned int k = 0; k < msg.nrl; k++)
        for (int j = 0; j < 3; j++)
            next_rl[k][j] = msg.rl[k][j];
    cur_rl_n = msg.nrl;
    keeper(h[2], rep, h[3], h[4], nfds, (const unsigned int *)payload, fds, h[1] == T_SPAWN_QUIET);
}

/* Any command not yet reported ended. A keeper is armed only when none is and no orphan
 * of one is left (dirty): no process of any command exists then, and the armed keeper
 * starts the very next command, so no command ever meets an armed keeper but its own
 * (none can stop or trace one to hold a later command, with or without Landlock's
 * signal scope); a command sees the processes it saw without arming (the server, its
 * keeper and its own); and the server's fork runs while the launcher takes the last
 * command's end, not while a keeper starts one on this CPU (the sendmsg's wake-up put
 * it here). A SPAWN while another command runs takes the fork path. */
static int running(void)
{
    for (int k = 0; k < MAX_CMDS; k++)
        if (cmds[k].rep >= 0)
            return 1;
    return 0;
}

/* While the server waits: the next command's keeper (a failure leaves none: the fork
 * path then, whose own failure is reported). */
static void arm(void)
{
    int rp[2], sv[2];
    if (sys6(NR_PIPE2, (long)rp, O_CLOEXEC | O_NONBLOCK, 0, 0, 0, 0) < 0)
        return;
    if (sys6(NR_SOCKETPAIR, 1 /* AF_UNIX */, SOCK_STREAM | O_CLOEXEC, 0, (long)sv, 0, 0) < 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0), sys6(NR_CLOSE, rp[1], 0, 0, 0, 0, 0);
        return;
    }
    long k = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (k == 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0), sys6(NR_CLOSE, sv[0], 0, 0, 0, 0, 0);
        keeper_fds();
        session_limits_forked();
        armed_keeper(rp[1], sv[1]);
    }
    sys6(NR_CLOSE, rp[1], 0, 0, 0, 0, 0), sys6(NR_CLOSE, sv[1], 0, 0, 0, 0, 0);
    if (k < 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0), sys6(NR_CLOSE, sv[0], 0, 0, 0, 0, 0);
        return;
    }
    armed.pid = k, armed.sock = sv[0], armed.rep = rp[0];
}

/* The SPAWN in the server's buffers, with the command's limits, to the armed keeper:
 * whole at once or not at all (never a wait on it). 1: the keeper has it. */
static int dispatch(const unsigned int *h, const long *fds, int nfds)
{
    struct dispatch_msg msg = { { 0 }, cur_rl_n, 0, { { 0 } } };
    for (int i = 0; i < 8; i++)
        msg.h[i] = h[i];
    for (unsigned int k = 0; k < cur_rl_n; k++)
        for (int j = 0; j < 3; j++)
            msg.rl[k][j] = next_rl[k][j];
    unsigned long control[(16 + (MAX_FDS + SESSION_MAX_CGROUPS) * 4 + 16) / 8];
    struct cmsghdr *c = (struct cmsghdr *)control;
    int n = 0, *p = (int *)(c + 1);
    for (int k = 0; k < nfds; k++)
        p[n++] = (int)fds[k];
    for (int k = 0; k < cur_cg_n; k++)
        p[n++] = (int)cur_cg[k];
    c->len = sizeof *c + (unsigned long)n * 4, c->level = 1, c->type = 1;
    struct iovec iov[2] = { { &msg, sizeof msg }, { payload, h[7] } };
    struct msghdr m = { 0, 0, iov, 2, n ? control : 0, n ? (c->len + 7) & ~7UL : 0, 0 };
    long r = sys6(NR_SENDMSG, armed.sock, (long)&m, MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0, 0);
    if (r == (long)(sizeof msg + h[7])) {
        sys6(NR_CLOSE, armed.sock, 0, 0, 0, 0, 0);
        armed.sock = -1;
        return 1;
    }
    disarm(1);   /* a part of the frame, or none: that keeper can never start it */
    return 0;
}

/* The server's children that are not live keepers: orphans of a keeper that died.
 * Swept when a keeper dies before its report, and then before every command until a
 * sweep finds none (an orphan's own children reach the server only when it dies). */
static int dirty;

static int live_keeper(long pid)
{
    if (pid == armed.pid)
        return 1;
    for (int k = 0; k < MAX_CMDS; k++)
        if (cmds[k].rep >= 0 && cmds[k].keeper == pid)
            return 1;
    return 0;
}
/* Every process of a command whose keeper died before its report (the command killed
 * it, or the server did because the launcher asked to end the command: a stopped or
 * traced keeper cannot be relied on): SIGKILL each of our children that is not a live
 * keeper and its whole subtree, reap each (our child: its pid is ours until we reap
 * it), and again for the processes each death hands to us, until none is left. Only
 * then is the command's end reported: nothing it made meets the next command. Never a
 * blocking wait: a dead keeper its own command traced is reapable only once its tracer
 * is gone too, and a tracer elsewhere (a concurrent command) could keep it so; after
 * END_ROUNDS rounds of 1 ms the sweeps before each command take over (dirty). */
#define END_ROUNDS 5000

static void end_orphans(void)
{
    static long kids[4096];
    for (int round = 0; round < END_ROUNDS; round++) {
        /* Done only when a fresh listing shows none: each death (a reaping here, or a
         * keeper's exit after the listing) may have handed us its children. */
        int n = read_pids("/proc/1/task/1/children", kids, 4096), found = 0, left = 0;
        for (int i = 0; i < n; i++) {
            if (live_keeper(kids[i]))
                continue;
            found = 1;
            sys6(NR_KILL, kids[i], SIGKILL, 0, 0, 0, 0);
            kill_subtree(kids[i]);
            int st;
            if (sys6(NR_WAIT4, kids[i], (long)&st, WNOHANG | WALL, 0, 0, 0) != kids[i])
                left = 1;
        }
        if (n >= 0 && !found) {
            dirty = 0;
            return;
        }
        if (left)
            sys6(NR_POLL, 0, 0, 1, 0, 0, 0);   /* 1 ms: SIGKILLed processes take a moment to die */
    }
    dirty = 1;
}

static void sweep(void)
{
    int killed = 0;
    static long kids[4096];
    int n = read_pids("/proc/1/task/1/children", kids, 4096);
    for (int i = 0; i < n; i++) {
        if (!live_keeper(kids[i]))
            sys6(NR_KILL, kids[i], SIGKILL, 0, 0, 0, 0), killed = 1;
    }
    dirty = killed;
}

static void spawn(const unsigned int *h, long *fds, int nfds)
{
    unsigned int id = h[2], ncand = h[3], nargv = h[4];
    if (!session_limits_for(id, h[6])) {   /* native/psb_session_limits.h: fail closed */
        put_event(chan, E_FAILED, id, 22 /* EINVAL */, PSB_TAIL_RLIMIT);
        return;
    }
    unsigned int *targets = (unsigned int *)payload;
    int slot = -1;
    for (int k = 0; k < MAX_CMDS && slot < 0; k++)
        if (cmds[k].rep < 0)
            slot = k;
    if ((h[6] & ~SPAWN_LIMITED) != (unsigned int)nfds || frame_strings(h, (unsigned long)nfds * 4) < 0) {
        put_event(chan, E_FAILED, id, 22 /* EINVAL */, PSB_TAIL_USAGE);
        return;
    }
    if (slot < 0) {
        put_event(chan, E_FAILED, id, EAGAIN, PSB_TAIL_FORK);
        return;
    }
    if (dirty)
        sweep();
    if (armed.pid > 0 && dispatch(h, fds, nfds)) {
        cmds[slot] = (struct cmd){ id, armed.pid, 0, armed.rep, 0, 0, { 0 } };
        armed.pid = 0, armed.rep = -1;
        session_limits_forked();
        return;
    }
    int rp[2];
    long pe = sys6(NR_PIPE2, (long)rp, O_CLOEXEC | O_NONBLOCK, 0, 0, 0, 0);
    if (pe < 0) {
        put_event(chan, E_FAILED, id, (unsigned int)-pe, PSB_TAIL_FORK);
        return;
    }
    long k = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (k == 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0);
        keeper_fds();
        keeper_init();
        keeper(id, rp[1], ncand, nargv, nfds, targets, fds, h[1] == T_SPAWN_QUIET);
    }
    session_limits_forked();
    sys6(NR_CLOSE, rp[1], 0, 0, 0, 0, 0);
    if (k < 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0);
        put_event(chan, E_FAILED, id, (unsigned int)-k, PSB_TAIL_FORK);
        return;
    }
    cmds[slot] = (struct cmd){ id, k, 0, rp[0], 0, 0, { 0 } };
}

static void report(int k);

static void frame(void)
{
    unsigned int h[8];
    char control[sizeof(struct cmsghdr) + MAX_FDS * 4 + 16];
    struct iovec iov = { h, sizeof h };
    struct msghdr m = { 0, 0, &iov, 1, control, sizeof control, 0 };
    long r = sys6(NR_RECVMSG, chan, (long)&m, MSG_CMSG_CLOEXEC, 0, 0, 0);
    if (r == -EINTR)
        return;
    if (r <= 0)
        quit(0);   /* EOF: the launcher closed the session */
    long fds[MAX_FDS];
    int nfds = 0;
    struct cmsghdr *c = (struct cmsghdr *)control;
    if (m.controllen >= sizeof *c && c->level == 1 /* SOL_SOCKET */ && c->type == 1 /* SCM_RIGHTS */) {
        int *p = (int *)(c + 1);
        for (unsigned long k = 0; k < (c->len - sizeof *c) / 4 && nfds < MAX_FDS; k++)
            fds[nfds++] = p[k];
    }
    if (r < (long)sizeof h && read_full(chan, (char *)h + r, sizeof h - (unsigned long)r) < 0)
        quit(0);
    if (h[0] != MAGIC || h[7] > MAX_PAYLOAD || read_full(chan, payload, h[7]) < 0) {
        put_event(chan, E_ERROR, h[2], 1, 0);
        quit(0);
    }
    if (h[1] == T_LIMITS) {
        if (session_limits_take(h, payload, fds, nfds) < 0)
            put_event(chan, E_FAILED, h[2], 22 /* EINVAL */, PSB_TAIL_RLIMIT);
    } else if (h[1] == T_SPAWN || h[1] == T_SPAWN_QUIET) {
        spawn(h, fds, nfds);
    } else if (h[1] == T_SIGNAL) {
        int k = find(h[2]);
        /* The launcher may have the keeper's STARTED (or EXITED) before our poll saw it:
         * the keeper wrote it to us first (keeper_event), so it is in the pipe. */
        if (k >= 0)
            report(k);
        /* The keeper is not reaped before its report pipe is done with (reports are read
         * before children are reaped), so its pid is still its own here. */
        if (k >= 0 && cmds[k].rep >= 0 && !cmds[k].exited) {
            /* SIGKILL also before the STARTED (a quiet command's timeout may come first):
             * the keeper dies, and the command with it (PR_SET_PDEATHSIG, or end_orphans
             * if it had not set it yet); reported as EXITED by SIGKILL. Other signals
             * wait for the command to exist. */
            if (h[3] == SIGKILL) {
                /* Ending a command never waits for its keeper's cooperation: the
                 * command may have stopped it (SIGSTOP), traced it, or made it block
                 * a relay forever. SIGKILL reaches a stopped or traced keeper; its
                 * pipe's end makes report() end the command's whole tree and report
                 * SIGKILL, here and now, before the next frame: a caller that does
                 * not wait for the exit (a cancelled asyncio run) and starts another
                 * command finds nothing of this one. */
                sys6(NR_KILL, cmds[k].keeper, SIGKILL, 0, 0, 0, 0);
                cmds[k].killed = 1;
                struct pollfd p = { cmds[k].rep, POLLIN, 0 };
                for (int i = 0; i < END_ROUNDS && cmds[k].rep >= 0; i++)
                    if (sys6(NR_POLL, (long)&p, 1, 1, 0, 0, 0) > 0)
                        report(k);
            } else if (cmds[k].pid > 0) {
                int info[32] = { SIG_RELAY, 0, -1 /* SI_QUEUE */ };
                info[6] = (int)h[3];
                sys6(NR_RT_SIGQUEUEINFO, cmds[k].keeper, SIG_RELAY, (long)info, 0, 0, 0);
            }
        }
    }
    for (int k = 0; k < nfds; k++)
        sys6(NR_CLOSE, fds[k], 0, 0, 0, 0, 0);
}

static void report(int k)
{
    unsigned int ev[4];
    long r;
    /* Every event there is (the pipe is non-blocking): the keeper may be reaped next.
     * The keeper sent each to the launcher itself (keeper_event): here only our state. */
    while ((r = sys6(NR_READ, cmds[k].rep, (long)ev, sizeof ev, 0, 0, 0)) == sizeof ev || r == -EINTR) {
        if (r == -EINTR)
            continue;
        if (ev[0] == E_STARTED)
            cmds[k].pid = ev[2];
        if (ev[0] == E_EXITED || ev[0] == E_FAILED)
            cmds[k].exited = 1;
        for (int i = 0; i < 4; i++)
            cmds[k].last[i] = ev[i];
    }
    if (r == -EAGAIN)
        return;
    sys6(NR_CLOSE, cmds[k].rep, 0, 0, 0, 0, 0);
    cmds[k].rep = -1;
    /* A keeper we SIGKILLed may have died between its write to us and its write to the
     * launcher: the last event again (the launcher ignores a repeat). */
    if (cmds[k].exited) {
        if (cmds[k].killed)
            put_event(chan, cmds[k].last[0], cmds[k].last[1], cmds[k].last[2], cmds[k].last[3]);
        return;
    }
    /* The keeper died before it reported (killed by the command, or by us on the
     * launcher's SIGKILL): its whole tree ends (its pipe closes before its children
     * are handed to us: end_orphans waits for the keeper itself too), then SIGKILL
     * is reported; after its STARTED again, which the keeper may not have sent the
     * launcher before it died (a repeat is ignored). */
    end_orphans();
    if (cmds[k].pid)
        put_event(chan, E_STARTED, cmds[k].id, (unsigned int)cmds[k].pid, 0);
    int ended = cmds[k].pid || cmds[k].killed;   /* killed by us before it started: SIGKILL too */
    put_event(chan, ended ? E_EXITED : E_FAILED, cmds[k].id, ended ? SIGKILL : ECHILD, ended ? 0 : PSB_TAIL_FORK);
}

void __attribute__((noreturn, used)) psb_session_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    sys6(NR_PRCTL, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
    sys6(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    if (argc < 3)
        quit(127);
    chan = parse(argv[1]);
    long self_fd = parse(argv[2]);
    if (argc > 3) {
        if (argc < 5 || argv[3][0] != '-' || argv[3][1] != 'L' || argv[3][2] != 0)
            quit(127);
        landlock_kind = parse(argv[4]);   /* a kind psb_landlock_new does not know: each command's EINVAL */
        if (landlock_kind <= 0)
            quit(127);
        for (long k = 5; k < argc; k++)   /* absolute paths */
            if (argv[k][0] != '/')
                quit(127);
    }
    if (chan < 3)
        quit(127);
    sys6(NR_FCNTL, chan, F_SETFD, FD_CLOEXEC, 0, 0, 0);
    if (self_fd >= 3 && self_fd != chan)
        sys6(NR_CLOSE, self_fd, 0, 0, 0, 0, 0);
    unsigned long all = ~0UL, chld = 1UL << (SIGCHLD - 1);
    sys6(NR_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, (long)&all, 0, 8, 0, 0);
    long sfd = sigfd = sys6(NR_SIGNALFD4, -1, (long)&chld, 8, O_CLOEXEC | O_NONBLOCK, 0, 0);
    long probe[1];
    if (sys6(NR_GETPID, 0, 0, 0, 0, 0, 0) != 1)
        put_event(chan, E_ERROR, 0, 2, 0), quit(0);
    if (sfd < 0 || read_pids("/proc/1/task/1/children", probe, 1) < 0)
        put_event(chan, E_ERROR, 0, 3, 0), quit(0);
    if (landlock_kind && landlock_kind != PSB_LANDLOCK_SIGNAL &&
        (ll_nkept = psb_landlock_keep(argv + 5, argc - 5, ll_kept, MAX_KEPT)) < 0)
        put_event(chan, E_ERROR, 0, 4, 0), quit(0);
    for (int k = 0; k < MAX_CMDS; k++)
        cmds[k].rep = -1;
    put_event(chan, E_READY, 0, 0, 0);
    for (;;) {
        if (armed.pid <= 0 && arm_lost < ARM_LOST_MAX && !running() && !dirty)
            arm();
        int n = 0;
        pfds[n++] = (struct pollfd){ (int)chan, POLLIN, 0 };
        pfds[n++] = (struct pollfd){ (int)sfd, POLLIN, 0 };
        int map[MAX_CMDS];
        for (int k = 0; k < MAX_CMDS; k++)
            if (cmds[k].rep >= 0)
                map[n - 2] = k, pfds[n++] = (struct pollfd){ cmds[k].rep, POLLIN, 0 };
        for (int j = n; j < MAX_CMDS + 2; j++)
            pfds[j].fd = -1;
        long r = sys6(NR_POLL, (long)pfds, n, -1, 0, 0, 0);
        if (r < 0)
            continue;
        /* Reports before reaping: a keeper writes its last event (or closes its pipe, by
         * dying) before its SIGCHLD, so it is reaped only once its slot is done. */
        for (int j = 2; j < n; j++)
            if (pfds[j].revents)
                report(map[j - 2]);
        if (pfds[1].revents) {
            char info[128 * 8];
            while (sys6(NR_READ, sfd, (long)info, sizeof info, 0, 0, 0) > 0)
                ;
            int st, reaped = 0;
            long w;
            while ((w = sys6(NR_WAIT4, -1, (long)&st, WNOHANG, 0, 0, 0)) > 0) {
                reaped = 1;
                if (w == armed.pid)   /* another is armed below, up to ARM_LOST_MAX */
                    disarm(0), arm_lost++;
            }
            if (reaped && dirty)
                sweep();
        }
        if (pfds[0].revents)
            frame();
    }
}
