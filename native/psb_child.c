/* pysandbox native executor: The cloned child: its entry points, the op interpreter (psb_child_main), the
 * fork-mode pid-1 init (psb_init), exec-init mode (psb_exec_init: the freestanding
 * init of psb_init.c from a sealed memfd) and the final exec of the command
 * (psb_exec: stdio, descriptors, signal state, the exec candidates Python computed). */
#include "psb_internal.h"
#define PSB_PID1_LIBC
#include "psb_pid1.h"
#define PSB_LIBC
#include "psb_tail.h"

/* A tail step's result (0 or -errno, native/psb_tail.h) as the op loop's: 0, or -1
 * with errno set. */
static int tail(long r)
{
    if (r >= 0)
        return 0;
    errno = (int)-r;
    return -1;
}

/* Runs in the sandbox's pid-1 process, no capabilities, after the fork of the
 * command (fork mode): the shared pid-1 loop (psb_pid1.h) reaps orphans, forwards
 * the signals of fwd_signals (Python's choice) to the command and reports its raw
 * wait status on the status pipe. Every signal is blocked (inherited from
 * psb_spawn). Never returns. */
static void psb_init(int cmd, int status_fd, unsigned long fwd_signals)
{
    /* This process is a copy of the caller's memory: make it undumpable so the
     * sandboxed command (same uid) cannot read it through /proc/1/mem or ptrace. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (status_fd > 0)
        syscall(SYS_close_range, 0, status_fd - 1, 0);
    syscall(SYS_close_range, status_fd + 1, ~0U, 0);
    psb_pid1_loop(cmd, status_fd, fwd_signals, 0);
}

/* The command's Landlock domain (native/psb_landlock.h): rules beneath the writable
 * destinations of OP's list (in the new root: symlinks there may be followed, the
 * command does not run yet; magic links never), and one for each descriptor it will be
 * given: the caller's stdio and pass_fds (the sources, before psb_exec moves them; a
 * pty's slave is opened later from the sandbox's own devpts, inside the root). */
/* Whether the setup closed FD first (launch close_first: pybwrap's --info-fd and
 * --json-status-fd). Such a stdio source starts closed in the command, as in bwrap's
 * child; its number may meanwhile name a descriptor of the setup's own. */
static int psb_closed_first(const struct psb_launch *l, int fd)
{
    for (int i = 0; i < l->nclose; i++)
        if (l->close_first[i] == fd)
            return 1;
    return 0;
}

static long psb_child_landlock(struct psb_child *c, const struct psb_op *op)
{
    const struct psb_launch *l = c->launch;
    struct psb_ll ll = psb_landlock_create(op->n, S(c, op->a), PSB_LL_RESOLVE_NO_MAGICLINKS);
    long r = 0;
    for (int i = 0; ll.rs >= 0 && i < 3 && r == 0; i++)
        if (!psb_closed_first(l, l->stdio[i]))   /* else a setup descriptor may hold its number */
            r = psb_landlock_fd_rule(&ll, l->stdio[i]);
    for (int i = 0; ll.rs >= 0 && i < l->npass && r == 0; i++)
        r = psb_landlock_fd_rule(&ll, l->pass_fds[i]);
    return psb_landlock_restrict(&ll, r);
}

/* Runs in the command's process, after the last op: stdio, descriptors, signal
 * state, exec. Only returns by failing. */
static void psb_exec(struct psb_child *c)
{
    const struct psb_launch *l = c->launch;
    int tmp[3];
    int slave = -1;
    if (l->pty_fd >= 0) {
        /* The sandbox's terminal (native/psb_tail.h), after every op: no capabilities,
         * seccomp loaded, inside the new root. */
        long r = psb_tail_pty(l->pty_fd, l->pty_winsize);
        if (r < 0)
            psb_fail(c, PSB_STAGE_PTY, -1, (int)-r);
        slave = (int)r;
    }
    /* Move the caller's stdio out of 0..2 first: a source may be another's target. */
    for (int i = 0; i < 3; i++) {
        int pty = slave >= 0 && (l->pty_stdio & (1 << i));
        tmp[i] = -1;
        if (!pty && psb_closed_first(l, l->stdio[i]))
            continue;   /* closed by the setup: the slot starts closed */
        tmp[i] = fcntl(pty ? slave : l->stdio[i], F_DUPFD_CLOEXEC, 3);
        if (tmp[i] < 0)
            psb_fail(c, PSB_STAGE_FDS, -1, errno);
    }
    for (int i = 0; i < 3; i++) {
        if (tmp[i] < 0)
            close(i);
        else if (dup2(tmp[i], i) < 0)
            psb_fail(c, PSB_STAGE_FDS, -1, errno);
    }
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        struct rlimit rl;
        long max = 65536;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < max)
            max = (long)rl.rlim_cur;
        for (long fd = 3; fd < max; fd++)
            fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    }
    for (int i = 0; i < l->npass; i++) {
        if (fcntl(l->pass_fds[i], F_SETFD, 0) != 0)
            psb_fail(c, PSB_STAGE_FDS, -1, errno);
    }
    /* Signal state as a fresh process. Caught signals go back to SIG_DFL *before*
     * unblocking: this process may share the caller's memory until execve, and a
     * handler of the caller (CPython's) must never run here. Python ignores SIGPIPE
     * and SIGXFSZ, which exec would keep ignored (as _posixsubprocess resets them). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction cur;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &cur) != 0)
            continue;
        if (cur.sa_handler != SIG_DFL && (cur.sa_handler != SIG_IGN || sig == SIGPIPE || sig == SIGXFSZ))
            sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    umask(c->old_umask);
    /* The sandbox's rlimits (pysandbox/limits.py), last: every descriptor of the setup is
     * open and nothing of ours runs after them but execve. */
    for (int k = 0; k < c->nrlimits; k++) {
        const struct psb_op *op = &c->plan->ops[c->rlimit_op[k]];
        long r = psb_tail_rlimit(op->n, (unsigned long)op->m, (unsigned long)op->mode);
        if (r < 0)
            psb_fail(c, PSB_STAGE_OP, c->rlimit_op[k], (int)-r);
    }
    /* The candidates Python computed (pysandbox/execpath.py), tried in order. */
    psb_stamp(l, PSB_STAMP_EXEC);
    psb_fail(c, PSB_STAGE_EXEC, -1, (int)-psb_tail_exec(l->cand, l->ncand, l->searched, c->argv, c->envp));
}

/* Runs in the setup process (pid 1, sharing the caller's memory, no capabilities)
 * at the INIT op in exec-init mode: clone the command's process (sharing memory, on
 * its own stack), then replace our memory with the freestanding init
 * (native/psb_init.c) from its sealed, unreadable memfd. The command's process
 * waits on the "go" pipe until our exec closes its write end: no code of the
 * command runs while a process of the sandbox still shares the caller's memory.
 * The error pipe stays open until our exec (O_CLOEXEC): EOF means both execs
 * happened. Returns only on failure, with errno set. */
static void psb_exec_init(struct psb_child *c, int i)
{
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0)
        return;
    struct psb_child *cmdc = (struct psb_child *)(void *)(c->cmd_stack - 4096);
    *cmdc = *c;  /* on the command's stack region, which outlives our exec */
    cmdc->start = i + 1;
    cmdc->go_fd = go[0];
    cmdc->go_wr = go[1];
    pid_t cmd = clone(psb_command_entry, c->cmd_stack - 8192, CLONE_VM | SIGCHLD, cmdc);
    if (cmd < 0)
        return;
    close(go[0]);
    /* Dumpable only when the command enters a Landlock domain before its exec (an op
     * after ours): then nothing it starts can reach us (native/psb_landlock.h), and our
     * owner can read /proc/PID/environ (the command's environment, passed here for
     * that) and /proc/PID/ns/ as with bwrap's pid 1. Until that exec the command's
     * process runs only our code: no window. The go pipe's write end goes through our
     * exec (not close-on-exec): the init closes it only after its PR_SET_DUMPABLE, so
     * the command starts once the init is as its owner will see it (else a command
     * quick to say "ready" could send its owner to an init not yet dumpable). */
    int dumpable = 0;
    for (int k = i + 1; k < c->plan->nops; k++) {
        if (c->plan->ops[k].kind == PSB_OP_LANDLOCK)
            dumpable = 1;
    }
    if ((c->status_fd < 0 || fcntl(c->status_fd, F_SETFD, 0) == 0) && fcntl(go[1], F_SETFD, 0) == 0) {
        char pidbuf[16], fdbuf[16], sigbuf[24];
        char *argv[] = { "psb-init", pidbuf, fdbuf, sigbuf, dumpable ? "1" : "0", NULL };
        char *const none[] = { NULL };
        char *const *envp = dumpable ? c->envp : none;
        pidbuf[psb_utoa(pidbuf, (unsigned int)cmd)] = '\0';
        fdbuf[psb_utoa(fdbuf, (unsigned int)(c->status_fd >= 0 ? c->status_fd : 0))] = '\0';
        sigbuf[psb_utoa(sigbuf, c->launch->fwd_signals)] = '\0';
        psb_stamp(c->launch, PSB_STAMP_INIT_EXEC);
        syscall(SYS_execveat, c->plan->init_fd, "", argv, envp, AT_EMPTY_PATH);
    }
    /* Kill the command's process before our exit closes the go pipe, so it can
     * never take EOF for a go. */
    int saved = errno;
    kill(cmd, SIGKILL);
    errno = saved;
}

static void psb_child_main(struct psb_child *c, int start)
{
    const struct psb_plan *plan = c->plan;
    /* The parent's SIGCHLD disposition may be SIG_IGN, which would auto-reap the
     * command before the init could see its status. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, NULL);

    for (int i = start; i < plan->nops; i++) {
        const struct psb_op *op = &plan->ops[i];
        int r = 0;
        switch (op->kind) {
        case PSB_OP_IDMAP:
            r = psb_write_file_at(AT_FDCWD, "/proc/self/setgroups", S(c, op->a));
            if (r == 0)
                r = psb_write_file_at(AT_FDCWD, "/proc/self/uid_map", S(c, op->b));
            if (r == 0)
                r = psb_write_file_at(AT_FDCWD, "/proc/self/gid_map", S(c, op->c));
            break;
        case PSB_OP_PDEATHSIG: {
            /* PR_SET_PDEATHSIG follows the thread that cloned us: that is one of
             * the launcher threads (psb_spawn), which live as long as the process. Set it
             * first, then check the parent is still there: getppid() is 0 in a new
             * pid namespace, so use the lifeline pipe, whose only writer is the
             * parent. POLLHUP: it is gone, and the signal will never come. */
            r = prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (r == 0) {
                struct pollfd pfd = { c->lifeline, POLLIN, 0 };
                int n;
                do {
                    n = poll(&pfd, 1, 0);
                } while (n < 0 && errno == EINTR);
                if (n < 0)
                    r = -1;
                else if (n > 0 && (pfd.revents & (POLLHUP | POLLERR)))
                    psb_fail(c, PSB_STAGE_PARENT_DIED, i, ESRCH);
            }
            break;
        }
        case PSB_OP_SETUP_ROOT:
            r = psb_op_setup_root(c, op);
            break;
        case PSB_OP_MKDIRS:
            /* As bwrap's ensure_dir: an existing directory is neither changed nor
             * chmod'ed (umask is 0, so a new one has exactly mode). m: the parents' mode. */
            r = psb_mkdirs_in(c, P(c, op->b), op->mode >= 0 ? (mode_t)op->mode : 0755,
                              op->m >= 0 ? (mode_t)op->m : 0755);
            break;
        case PSB_OP_MKFILE:
            r = psb_mkfile_in(c, P(c, op->b), op->m >= 0 ? (mode_t)op->m : 0755);
            break;
        case PSB_OP_BIND:
            if ((op->flags & PSB_F_IF_WRITABLE) && access(P(c, op->a), W_OK) != 0) {
                /* bwrap's /proc covering: already read-only (or absent) here is fine. */
                if (errno == EACCES || errno == ENOENT || errno == EROFS)
                    break;
                r = -1;
                break;
            }
            r = psb_op_bind(c, op);
            break;
        case PSB_OP_MOUNT:
            r = psb_op_mount(c, op);
            break;
        case PSB_OP_SETATTR:
            r = psb_op_setattr(c, op);
            break;
        case PSB_OP_SYMLINK:
            r = psb_op_symlink(c, P(c, op->a), P(c, op->b));
            break;
        case PSB_OP_WRITE:
            r = psb_op_write(c, op);
            break;
        case PSB_OP_CHMOD:
            r = psb_op_chmod(c, op);
            break;
        case PSB_OP_PIVOT:
            r = psb_op_pivot(c);
            break;
        case PSB_OP_LOOPBACK:
            r = psb_loopback_up();
            break;
        case PSB_OP_LISTEN:
        case PSB_OP_CAPS:
        case PSB_OP_NNP:
        case PSB_OP_SECCOMP:
        case PSB_OP_MOUNT_PRIVATE:
        case PSB_OP_RO_COVER:   /* the setup tail: one executor (native/psb_tail.h) */
            r = tail(psb_tail_op(op, plan->strtab, c->launch->proxy_fd, c->launch->notify_fd));
            break;
        case PSB_OP_LANDLOCK:
            r = tail(psb_child_landlock(c, op));
            break;
        case PSB_OP_HOSTNAME:
            r = sethostname(P(c, op->a), strlen(P(c, op->a)));
            break;
        case PSB_OP_DISABLE_USERNS:
            r = psb_op_disable_userns(c, op);
            break;
        case PSB_OP_INIT: {
            if (plan->init_fd >= 0) {
                psb_exec_init(c, i);   /* returns only on failure, errno set */
                r = -1;
                break;
            }
            /* Fork mode: we have a private copy of the caller's memory and stay the
             * init. The command shares it until it execs (CLONE_VM|CLONE_VFORK, on a
             * static stack of this private copy): no second page-table copy. */
            static char stack[64 * 1024] __attribute__((aligned(16)));
            /* Undumpable BEFORE the command exists: after its exec and before
             * psb_init's own prctl it could otherwise ptrace us (same uid) and read
             * the caller's memory and descriptors. Dumpable is per mm: the command
             * shares ours until its exec, whose new mm is dumpable again. */
            if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
                r = -1;
                break;
            }
            if (c->proc_self_fd >= 0) {
                close(c->proc_self_fd);
                c->proc_self_fd = -1;
            }
            if (c->userns_sysctl_fd >= 0) {
                close(c->userns_sysctl_fd);
                c->userns_sysctl_fd = -EBADF;
            }
            struct psb_child cmdc = *c;
            cmdc.start = i + 1;
            pid_t cmd = clone(psb_command_entry, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &cmdc);
            if (cmd < 0) {
                r = -1;
                break;
            }
            close(c->errfd);  /* EOF for the parent now comes from the command's exec */
            psb_init(cmd, c->status_fd, c->launch->fwd_signals);
            break;
        }
        case PSB_OP_SETSID:
            r = setsid() < 0 ? -1 : 0;
            break;
        case PSB_OP_CHDIR:
            r = psb_op_chdir(op, P(c, op->a));
            break;
        case PSB_OP_WAIT_FD:
            r = psb_op_wait_fd(c, op, i);
            break;
        case PSB_OP_SETNS:
            r = setns((int)op->n, (int)op->m);
            break;
        case PSB_OP_UNSHARE:
            r = unshare((int)op->n);
            break;
        case PSB_OP_HOP: {
            /* A joined or unshared pid namespace holds only our children. Become a
             * child of the launcher (CLONE_PARENT: its waitpid and PR_SET_PDEATHSIG
             * then apply as without the hop). Announce first, so the records stay in
             * order; the new process reports itself: the pid clone returns here is
             * in our pid namespace, maybe not the launcher's. A copy, never our
             * memory: no CLONE_VM. A failed clone is an ordinary failure record. */
            r = psb_record(c, PSB_STAGE_HOP, i);
            if (r != 0)
                break;
            pid_t next = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
            if (next < 0) {
                r = -1;
                break;
            }
            if (next > 0)
                _exit(0);
            r = psb_record(c, PSB_STAGE_HOP_PID, i);
            if (r == 0 && i == c->last_hop) {
                psb_wait_release(c, i + 1);
                psb_wait_gate(c, i + 1);
            }
            break;
        }
        case PSB_OP_RLIMIT:
            if (c->nrlimits >= PSB_MAX_RLIMITS) {
                errno = E2BIG;
                r = -1;
                break;
            }
            c->rlimit_op[c->nrlimits++] = i;
            r = 0;
            break;
        case PSB_OP_CHECK_PATH: {
            int fd = psb_open_in(c, P(c, op->a), O_PATH, 0, 1);
            r = fd < 0 ? -1 : close(fd);
            break;
        }
        default:
            errno = EINVAL;
            r = -1;
        }
        if (r != 0)
            psb_fail(c, PSB_STAGE_OP, i, errno);
        psb_stamp(c->launch, i);
    }
    if (c->proc_self_fd >= 0)
        close(c->proc_self_fd);
    if (c->userns_sysctl_fd >= 0)
        close(c->userns_sysctl_fd);
    if (c->oldroot_fd >= 0)
        close(c->oldroot_fd);
    psb_exec(c);
}

/* Runs in the command's process (cloned by the init, sharing its memory until exec). */
int psb_command_entry(void *arg)
{
    struct psb_child *c = arg;
    if (c->status_fd >= 0)
        close(c->status_fd);
    if (c->go_fd >= 0) {
        /* Exec-init mode: wait until the setup process has become the init. */
        char b;
        ssize_t r;
        close(c->go_wr);
        do {
            r = read(c->go_fd, &b, 1);
        } while (r < 0 && errno == EINTR);
        if (r != 0)
            psb_fail(c, PSB_STAGE_OP, c->start - 1, r < 0 ? errno : EPROTO);
        close(c->go_fd);
    }
    psb_stamp(c->launch, PSB_STAMP_CMD);
    psb_child_main(c, c->start);
    return 127;
}

/* Runs in the setup process in exec-init mode (sharing the caller's memory on its
 * own stack until it execs the init). */
int psb_setup_entry(void *arg)
{
    struct psb_child *c = arg;
    psb_stamp(c->launch, PSB_STAMP_ENTRY);
    close(c->parent_fds[0]);
    close(c->parent_fds[1]);
    for (int k = 2; k < 4; k++) {
        if (c->parent_fds[k] >= 0)
            close(c->parent_fds[k]);
    }
    for (int i = 0; i < c->launch->nclose; i++)
        close(c->launch->close_first[i]);
    c->old_umask = umask(0);   /* as bwrap: setup creates exact modes */
    if (c->last_hop < 0) {
        psb_wait_release(c, 0);
        psb_wait_gate(c, 0);
    }
    psb_child_main(c, 0);
    return 127;
}
