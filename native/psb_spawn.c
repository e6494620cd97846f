/* pysandbox native executor: The caller's side of a launch: psb_spawn hands the clone to a launcher thread
 * that never exits (so PR_SET_PDEATHSIG follows the process, not a short-lived
 * thread), psb_spawn_run clones the child and follows the hop protocol (records on
 * the error pipe or a credentials socket pair) until exec or failure; with
 * launch->monitor (as_pid_1) it starts the launcher's lifetime monitor (psb_monitor_start)
 * before the child may go on. Runs in the caller's process, any privilege. */
#include "psb_internal.h"
#define PSB_MONITOR_LIBC
#include "psb_monitor.h"

/* The lifetime monitor's descriptors, for psb_monitor_start. */
struct psb_monitor_arg {
    int fds[3];            /* pid 1's pidfd, the lifeline's read end, the launcher's pidfd */
    int exe_fd;            /* the init's memfd (monitor mode), or -1 */
    volatile int failed;   /* set by a vfork'd monitor whose exec failed */
};

/* Runs in the new monitor process right after its clone (a vfork sharing the caller's
 * memory and thread, or a fork of a possibly multi-threaded caller): raw system calls
 * only, no malloc or stdio. The three descriptors become 3, 4 and 5 (native/psb_monitor.h),
 * the init's memfd 6 (close-on-exec), every other descriptor is closed, and the monitor
 * leaves the caller's session and process group. 0, or -1. */
static int psb_monitor_fds(const struct psb_monitor_arg *a)
{
    /* Every signal, the two libc keeps for itself (32, 33) too; kept across the exec. */
    unsigned long all = ~0UL;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, NULL, sizeof all);
    int tmp[4];
    int n = a->exe_fd >= 0 ? 4 : 3;
    for (int k = 0; k < n; k++) {
        tmp[k] = fcntl(k < 3 ? a->fds[k] : a->exe_fd, F_DUPFD, 10);
        if (tmp[k] < 0)
            return -1;
    }
    for (int k = 0; k < 3; k++) {
        if (dup2(tmp[k], 3 + k) < 0)
            return -1;
    }
    if (n == 4 && dup3(tmp[3], 6, O_CLOEXEC) < 0)
        return -1;
    if (syscall(SYS_close_range, n == 4 ? 7 : 6, ~0U, 0) != 0) {
        struct rlimit rl;
        long max = 65536;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < max)
            max = (long)rl.rlim_cur;
        for (long fd = n == 4 ? 7 : 6; fd < max; fd++)
            close((int)fd);
    }
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    return setsid() < 0 ? -1 : 0;
}

static int psb_monitor_exec_entry(void *p)
{
    struct psb_monitor_arg *a = p;
    if (psb_monitor_fds(a) == 0) {
        char *argv[] = { "psb-monitor", "monitor", NULL };
        char *envp[] = { NULL };
        syscall(SYS_execveat, 6, "", argv, envp, AT_EMPTY_PATH);
    }
    a->failed = 1;
    _exit(127);
}

/* Runs in the caller's process (any thread), any privilege: start the lifetime monitor
 * of the sandbox whose pid 1 ``pid1_fd`` (a pidfd) names, for an as_pid_1 launch (no
 * init of ours: the command is pid 1 and may clear its own PR_SET_PDEATHSIG). The
 * caller opened that pidfd while pid 1 could not yet have been reaped (its own or its
 * bwrap's child): never a reused pid. ``exe_fd``: the init's sealed memfd, exec'd in
 * monitor mode (the monitor then holds nothing of the caller's memory); -1 or a failed
 * exec: the monitor is a fork of the caller running the same loop (native/psb_monitor.h).
 * The monitor gets its own copies of the descriptors; *lifeline_fd gets the lifeline's
 * write end (close-on-exec): closing it ends the sandbox and the monitor. Returns the
 * monitor's pid (a child of ours: the caller reaps it), or -errno. */
int psb_monitor_start(int pid1_fd, int exe_fd, int *lifeline_fd)
{
    int self = (int)syscall(__NR_pidfd_open, getpid(), 0);
    if (self < 0)
        return -errno;
    int lp[2];
    if (pipe2(lp, O_CLOEXEC) != 0) {
        int saved = errno;
        close(self);
        return -saved;
    }
    struct psb_monitor_arg a = { { pid1_fd, lp[0], self }, exe_fd, 0 };
    sigset_t all, old;
    sigfillset(&all);
    /* The monitor keeps every signal blocked (inherited, also across its exec). */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t m = -1;
    int err = 0;
    if (exe_fd >= 0) {
        const size_t size = 64 * 1024;
        char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack != MAP_FAILED) {
            m = clone(psb_monitor_exec_entry, stack + size, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
            munmap(stack, size);   /* the monitor has exec'd or exited */
            if (m > 0 && a.failed) {
                while (waitpid(m, NULL, 0) < 0 && errno == EINTR)
                    ;
                m = -1;
            }
        }
    }
    if (m < 0) {
        a.exe_fd = -1;
        m = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (m == 0) {
            if (psb_monitor_fds(&a) != 0)
                _exit(127);
            psb_monitor_loop();
        }
        err = errno;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(lp[0]);
    close(self);
    if (m < 0) {
        close(lp[1]);
        return -(err ? err : EAGAIN);
    }
    *lifeline_fd = lp[1];
    return m;
}

/* Runs in the caller's process: the monitor of launch->monitor for our child ``pid``,
 * whose pid is final (after the last hop) and which cannot have been reaped (only we
 * reap it): then the go byte on the gate the child waits on (psb_wait_gate). 0, or
 * -errno of a monitor that could not start (the caller fails the launch; the child
 * reads EOF at its gate and never runs the command). */
static int psb_monitor_gate(const struct psb_launch *launch, pid_t pid, int gate_wr, struct psb_result *res)
{
    int pfd = (int)syscall(__NR_pidfd_open, pid, 0);
    if (pfd < 0)
        return -errno;
    int lf = -1;
    int m = psb_monitor_start(pfd, launch->monitor_exe, &lf);
    close(pfd);
    if (m < 0)
        return m;
    res->monitor_pid = m;
    res->monitor_fd = lf;
    /* A failed write: the child is gone already, and its own record (or its death) says
     * why; the monitor is ended with the launch's failure. */
    char go = 1;
    (void)psb_write_all(gate_wr, &go, 1);
    return 0;
}

/* Runs in the caller's process: a failed launch's monitor ends (the lifeline closed: it
 * SIGKILLs what is left of the child and exits) and is reaped. */
static void psb_monitor_end(struct psb_result *res)
{
    if (res->monitor_fd >= 0)
        close(res->monitor_fd);
    if (res->monitor_pid > 0) {
        while (waitpid(res->monitor_pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    res->monitor_fd = res->monitor_pid = -1;
}

static int psb_spawn_here(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res)
{
    res->pid = -1;
    res->status_fd = -1;
    res->monitor_pid = res->monitor_fd = -1;
    res->mntns_fd = -1;
    res->stage = 0;
    res->op = -1;
    res->err = 0;

    /* argv/envp pointer arrays: the parent may allocate, the child not (it only
     * reads them, from its copy or from our memory until it execs). */
    char **argv = malloc(sizeof(char *) * ((size_t)launch->argc + (size_t)launch->envc + 2));
    if (argv == NULL) {
        res->stage = PSB_STAGE_PIPE;
        res->err = ENOMEM;
        return -1;
    }
    char **envp = argv + launch->argc + 1;
    int rc = psb_spawn_run(plan, launch, res, argv, envp);
    free(argv);
    return rc;
}

/* The error channel of a plan with PSB_OP_HOP: a socket pair whose reading end gets
 * every sender's credentials (its pid in the reader's pid namespace). */
static int psb_cred_socketpair(int fds[2])
{
    int one = 1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
        return -1;
    if (setsockopt(fds[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
        int saved = errno;
        close(fds[0]);
        close(fds[1]);
        errno = saved;
        return -1;
    }
    return 0;
}

/* One record from the error channel: its size (0 at EOF or on error, less than a
 * record when cut short). With ``sender``, the channel is psb_cred_socketpair's and
 * *sender gets the writer's pid as the kernel saw it. */
static size_t psb_read_record(int fd, struct psb_record *rec, pid_t *sender)
{
    if (sender == NULL) {
        size_t got = 0;
        while (got < sizeof *rec) {
            ssize_t r = read(fd, (char *)rec + got, sizeof *rec - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        return got;
    }
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(struct ucred))];
    } control;
    struct iovec iov = { rec, sizeof *rec };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t r;
    do {
        r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r <= 0)
        return 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h != NULL; h = CMSG_NXTHDR(&msg, h)) {
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(h), sizeof cred);
            *sender = cred.pid;
        }
    }
    return (size_t)r;
}

/* Runs in the caller's process: the launch's pipes closed (entries < 0: none), errno
 * kept, for a failure before the clone. */
static void psb_close_pipes(int errpipe[2], int lifeline[2], int status[2], int gate[2])
{
    int saved = errno;
    int *pipes[4] = { errpipe, lifeline, status, gate };
    for (int k = 0; k < 4; k++) {
        for (int j = 0; j < 2; j++) {
            if (pipes[k][j] >= 0)
                close(pipes[k][j]);
        }
    }
    errno = saved;
}

/* psb_spawn_here, once the argv/envp arrays exist. */
int psb_spawn_run(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res,
                         char **argv, char **envp)
{
    const char *p = launch->argbuf;
    for (int i = 0; i < launch->argc; i++, p += strlen(p) + 1)
        argv[i] = (char *)p;
    argv[launch->argc] = NULL;
    p = launch->envbuf;
    for (int i = 0; i < launch->envc; i++, p += strlen(p) + 1)
        envp[i] = (char *)p;
    envp[launch->envc] = NULL;

    int hops = 0, last_hop = -1;
    for (int i = 0; i < plan->nops; i++) {
        if (plan->ops[i].kind == PSB_OP_HOP) {
            hops++;
            last_hop = i;
        }
    }
    int errpipe[2], lifeline[2], status[2] = { -1, -1 };
    if (hops == 0 ? pipe2(errpipe, O_CLOEXEC) != 0 : psb_cred_socketpair(errpipe) != 0)
        goto pipe_failed;
    if (pipe2(lifeline, O_CLOEXEC) != 0) {
        close(errpipe[0]);
        close(errpipe[1]);
        goto pipe_failed;
    }
    if (launch->want_status && pipe2(status, O_CLOEXEC) != 0) {
        close(errpipe[0]);
        close(errpipe[1]);
        close(lifeline[0]);
        close(lifeline[1]);
        goto pipe_failed;
    }
    /* as_pid_1: the child waits at this gate until the launcher's monitor exists. */
    int gate[2] = { -1, -1 };
    if (launch->monitor && pipe2(gate, O_CLOEXEC) != 0) {
        psb_close_pipes(errpipe, lifeline, status, gate);
        goto pipe_failed;
    }
    int monitor_err = 0;

    struct psb_child c;
    memset(&c, 0, sizeof c);
    c.plan = plan;
    c.launch = launch;
    c.argv = argv;
    c.envp = envp;
    c.errfd = errpipe[1];
    c.lifeline = lifeline[0];
    c.status_fd = status[1];
    c.proc_self_fd = -1;
    c.userns_sysctl_fd = -EBADF;
    c.parent_fds[0] = errpipe[0];
    c.parent_fds[1] = lifeline[1];
    c.parent_fds[2] = status[0];
    c.parent_fds[3] = gate[1];
    c.gate_fd = gate[0];
    c.go_fd = c.go_wr = -1;
    c.last_hop = last_hop;
    c.oldroot_fd = -1;

    /* Exec-init mode: the setup process shares our memory (no page-table copy) on a
     * stack of its own, and the command gets another. Both are done with our memory
     * once the error pipe reports EOF (each has exec'd or exited). */
    char *stacks = NULL;
    const size_t stack_size = 128 * 1024;
    int share = plan->share_memory;
    for (int i = 0; share && i < plan->nops; i++) {
        /* A fork-mode init would keep running in our memory: never share then. */
        if (plan->ops[i].kind == PSB_OP_INIT && plan->init_fd < 0)
            share = 0;
    }
    if (share) {
        stacks = mmap(NULL, 2 * stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stacks == MAP_FAILED) {
            psb_close_pipes(errpipe, lifeline, status, gate);
            goto pipe_failed;
        }
        c.cmd_stack = stacks + 2 * stack_size;
    }
    sigset_t all, old;
    sigfillset(&all);
    /* Every signal stays blocked until the error pipe is read: no EINTR, and no
     * handler of ours runs while a child shares our memory (and our errno). */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid;
    psb_stamp(launch, PSB_STAMP_CLONE);
    if (stacks != NULL) {
        pid = clone(psb_setup_entry, stacks + stack_size, (int)(plan->clone_flags | CLONE_VM | SIGCHLD), &c);
    } else {
        pid = (pid_t)syscall(SYS_clone, plan->clone_flags | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0)
            psb_setup_entry(&c);
    }
    int clone_errno = errno;
    psb_stamp(launch, PSB_STAMP_CLONED);
    if (pid > 0 && launch->started_fd >= 0 && !hops) {
        /* Before setup: a WAIT_FD op may wait for someone who needs our child's pid
         * (bwrap's info-fd comes before its --userns-block-fd). Best effort: the
         * reader's failure must not leave the child running unseen. */
        int32_t v = (int32_t)pid;
        (void)psb_write_all(launch->started_fd, (const char *)&v, sizeof v);
    }
    close(errpipe[1]);
    close(lifeline[0]);
    if (status[1] >= 0)
        close(status[1]);
    if (gate[0] >= 0)
        close(gate[0]);
    if (!hops)   /* the teardown of its mounts off the caller's waitpid (psb_nsref.c) */
        res->mntns_fd = psb_mntns_ref(plan, pid);
    if (pid > 0 && gate[1] >= 0 && !hops) {
        /* Our child, not yet reaped: its pidfd cannot name another process. */
        monitor_err = -psb_monitor_gate(launch, pid, gate[1], res);
        close(gate[1]);
        gate[1] = -1;
    }
    if (pid < 0) {
        if (gate[1] >= 0)
            close(gate[1]);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (stacks != NULL)
            munmap(stacks, 2 * stack_size);
        close(errpipe[0]);
        close(lifeline[1]);
        if (status[0] >= 0)
            close(status[0]);
        res->stage = PSB_STAGE_CLONE;
        res->err = clone_errno;
        return -1;
    }
    struct psb_record rec;
    size_t got = 0;
    int hopping = 0;
    for (;;) {
        pid_t sender = 0;
        got = psb_read_record(errpipe[0], &rec, hops > 0 ? &sender : NULL);
        if (got != sizeof rec || (rec.stage != PSB_STAGE_HOP && rec.stage != PSB_STAGE_HOP_PID))
            break;
        if (rec.stage == PSB_STAGE_HOP) {
            hopping = 1;
            continue;
        }
        if (!hopping || sender <= 0) {   /* out of order, or no credentials: fail closed */
            got = 0;
            break;
        }
        /* Setup went on in a new child of ours; the old one exits. The pid that counts
         * is the last hop's: the one that runs the rest of the setup. */
        while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
            ;
        pid = sender;
        hopping = 0;
        if (--hops == 0) {
            res->mntns_fd = psb_mntns_ref(plan, pid);
            if (launch->started_fd >= 0) {
                int32_t v = (int32_t)pid;
                (void)psb_write_all(launch->started_fd, (const char *)&v, sizeof v);
            }
            if (gate[1] >= 0) {
                /* The last hop's process: a CLONE_PARENT child of ours, not yet reaped. */
                monitor_err = -psb_monitor_gate(launch, pid, gate[1], res);
                close(gate[1]);
                gate[1] = -1;
            }
        }
    }
    if (gate[1] >= 0) {   /* the hops ended early: the child failed */
        close(gate[1]);
        gate[1] = -1;
    }
    psb_stamp(launch, PSB_STAMP_EOF);
    if (got == 0) {
        /* Executed: the sandbox's processes have left the clone-time mount namespace
         * for the one MOUNT_PRIVATE made (psb_tail.h); the old one's teardown goes to
         * the closer thread, the reference follows them (best effort: a command already
         * gone takes its namespace down in its exit, as without). */
        int final = psb_mntns_ref(plan, pid);
        psb_close_later(res->mntns_fd);
        res->mntns_fd = final;
    }
    if (got == 0 && hopping)
        got = 1;   /* EOF between the announcement and the new process's report: a failure */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (stacks != NULL) {
        if (got != 0) {
            /* A failure: the setup process may still be running on its stack. */
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
                ;
            munmap(stacks, 2 * stack_size);
            stacks = NULL;
            close(errpipe[0]);
            close(lifeline[1]);
            if (status[0] >= 0)
                close(status[0]);
            goto report;
        }
        munmap(stacks, 2 * stack_size);
    }
    close(errpipe[0]);
    /* The child has passed its parent-death check: the lifeline has done its job. */
    close(lifeline[1]);
    if (got == 0 && monitor_err == 0) {
        res->pid = pid;
        res->status_fd = status[0];
        return 0;
    }
    if (status[0] >= 0)
        close(status[0]);
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
report:
    if (res->mntns_fd >= 0)
        close(res->mntns_fd);
    res->mntns_fd = -1;
    psb_monitor_end(res);
    if (monitor_err != 0) {
        res->stage = PSB_STAGE_MONITOR;
        res->err = monitor_err;
    } else if (got < sizeof rec) {
        res->stage = PSB_STAGE_PIPE;
        res->err = EPIPE;
    } else {
        res->stage = rec.stage;
        res->op = rec.op;
        res->err = rec.err;
    }
    return -1;

pipe_failed:
    res->stage = PSB_STAGE_PIPE;
    res->err = errno;
    return -1;
}

/* Launcher threads. PR_SET_PDEATHSIG fires when the *thread* that cloned the child
 * exits, not the process: a sandbox started from a short-lived thread (a pool
 * worker) would die with it. So the clone is done by one of a pool of C threads
 * that never exit (every signal blocked): the sandbox dies with the process. The
 * pool grows to the number of concurrent launches and is dropped in a forked child
 * (its threads do not exist there). The main thread clones directly. */
struct psb_worker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int has_job, done, rc;
    const struct psb_plan *plan;
    const struct psb_launch *launch;
    struct psb_result *res;
    struct psb_worker *next;   /* idle list */
};

static pthread_mutex_t psb_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct psb_worker *psb_idle;
static int psb_atfork_done;

/* Runs in a forked child of the caller: the launcher threads are gone. */
static void psb_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    psb_pool_mu = fresh;
    psb_idle = NULL;
}

/* Runs on a launcher thread of the caller's process for the life of the process. */
static void *psb_worker_main(void *arg)
{
    struct psb_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->has_job)
            pthread_cond_wait(&w->cv, &w->mu);
        w->has_job = 0;
        pthread_mutex_unlock(&w->mu);
        int rc = psb_spawn_here(w->plan, w->launch, w->res);
        pthread_mutex_lock(&w->mu);
        w->rc = rc;
        w->done = 1;
        pthread_cond_broadcast(&w->cv);
    }
    return NULL;
}

/* Runs in the caller's process, any thread: a detached thread of ours running fn(arg),
 * every signal blocked from its start (it never runs a handler of the caller's).
 * 0 or an errno. */
int psb_thread_start(void *(*fn)(void *), void *arg, size_t stack_size)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack_size);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread starts with all blocked */
    pthread_t t;
    int err = pthread_create(&t, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return err;
}

/* Runs in the caller's process, any thread. */
static struct psb_worker *psb_worker_get(void)
{
    pthread_mutex_lock(&psb_pool_mu);
    if (!psb_atfork_done) {
        pthread_atfork(NULL, NULL, psb_atfork_child);
        psb_atfork_done = 1;
    }
    struct psb_worker *w = psb_idle;
    if (w != NULL) {
        psb_idle = w->next;
        pthread_mutex_unlock(&psb_pool_mu);
        return w;
    }
    pthread_mutex_unlock(&psb_pool_mu);
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int err = psb_thread_start(psb_worker_main, w, 1024 * 1024);
    if (err != 0) {
        free(w);
        errno = err;
        return NULL;
    }
    return w;
}

/* Runs in the caller's process (any thread), any privilege: the public entry point.
 * Blocks until the command was executed or a step failed; cffi releases the GIL. */
int psb_spawn(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res)
{
    /* The main thread lives as long as the process (Python joins its other threads
     * from it at exit): clone directly, saving two thread hand-offs. */
    if ((pid_t)syscall(SYS_gettid) == getpid())
        return psb_spawn_here(plan, launch, res);
    struct psb_worker *w = psb_worker_get();
    if (w == NULL) {
        res->pid = -1;
        res->status_fd = -1;
        res->monitor_pid = res->monitor_fd = -1;
        res->mntns_fd = -1;
        res->stage = PSB_STAGE_PIPE;
        res->op = -1;
        res->err = errno ? errno : EAGAIN;
        return -1;
    }
    pthread_mutex_lock(&w->mu);
    w->plan = plan;
    w->launch = launch;
    w->res = res;
    w->done = 0;
    w->has_job = 1;
    pthread_cond_broadcast(&w->cv);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->rc;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&psb_pool_mu);
    w->next = psb_idle;
    psb_idle = w;
    pthread_mutex_unlock(&psb_pool_mu);
    return rc;
}
