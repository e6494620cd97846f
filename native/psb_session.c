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
#define MSG_CTRUNC 0x8
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

#include "psb_session_keeper.h"   /* the keepers: the state above is theirs too */

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
    struct dispatch_msg msg = { { 0 }, cur_rl_n, (unsigned int)cur_cg_n, { { 0 } } };
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
