/* A session command's keeper (native/psb_session.c: the server; included there once,
 * after the state the two share: the frame buffers, the channel, the Landlock rules'
 * kept descriptors, put_event and read_full). A keeper is the server's child: it starts
 * its command with vfork semantics, relays signals to it, ends its whole subtree when
 * it ends and reports its events (the protocol: psb_session.c's header). The armed one
 * (armed_keeper) was forked before its command came and takes its SPAWN from the
 * server on a socketpair of its own. */
#ifndef PSB_SESSION_KEEPER_H
#define PSB_SESSION_KEEPER_H

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

/* What the keeper needs of the server's state, beside the frame: the rlimits its command
 * takes (psb_session_limits.h; the cgroup descriptors ride after the frame's). */
/* ncg: the cgroup descriptors after the frame's (the keeper checks it got exactly those:
 * a command meant to run in its cgroups never runs outside one). */
struct dispatch_msg { unsigned int h[8]; unsigned int nrl, ncg; unsigned long rl[SESSION_MAX_RLIMITS][3]; };

#define PREFAULT (64u << 10)

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
    if (nfds > MAX_FDS || (m.flags & MSG_CTRUNC) || msg.ncg > SESSION_MAX_CGROUPS ||
        (unsigned int)nall != (unsigned int)nfds + msg.ncg || msg.nrl > SESSION_MAX_RLIMITS ||
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

#endif
