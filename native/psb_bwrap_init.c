/* The bwrap backend's pid-1 init, as a freestanding static program (no libc).
 * build_native.py compiles it and embeds the bytes in pysandbox._native; the bwrap
 * backend puts it in a sealed, execute-only memfd and has bwrap exec it as the command
 * under --as-pid-1 (through /proc/self/fd/N), so bwrap's own pid 1 (same uid,
 * dumpable, ptraceable by the command) never exists.
 *
 * argv: psb-bwrap-init STATUS_FD SELF_FD PLAN_FD -- EXE ARGV0 ARGS...
 *
 * PLAN_FD: a memfd sealed against any change (F_SEAL_WRITE|SHRINK|GROW|SEAL, checked
 * here: else nothing runs) holding the setup tail of the plan as the native executor's
 * op array (native/psb.h: struct psb_tail_hdr, then struct psb_op[nops], then the
 * string table; pysandbox/backends/bwrap_tail.py packs it from native_translate's ops).
 * It is read whole, validated (the header, every op's kind, every string offset inside
 * the table and NUL-terminated, LANDLOCK's path list too, each seccomp program's
 * bounds), then closed: nothing
 * after this init holds it. The kinds allowed: the tail's (LISTEN CAPS NNP INIT
 * LANDLOCK SECCOMP RLIMIT, each run by native/psb_tail.h psb_tail_op as the native
 * child runs it, MOUNT_PRIVATE and RO_COVER included) and this init's own BIND_CHECK.
 *
 * The ops run in order in this process up to INIT, which forks the command's process;
 * the ops after INIT run in it (without INIT, exec mode: as_pid_1 or no pid namespace,
 * the command is exec'd here). The launcher's gate (header gate_fd: one byte once its
 * lifetime monitor holds our pidfd, pysandbox/backends/monitor.py; EOF: exit 125, the
 * command never runs) is waited for before the first op. In the command's process, after the ops: the terminal
 * (header pty_*: native/psb_tail.h psb_tail_pty, the slave on each stdio slot of the
 * mask), the signal mask restored, the RLIMIT ops applied (last: the setup is never
 * under them), exec.
 *
 * PR_SET_DUMPABLE 0 first (the memfd is execute-only, so exec already made us
 * undumpable), PR_SET_PDEATHSIG SIGKILL and a lifeline check (the status pipe's
 * reader, the launcher, still exists). A LANDLOCK op after INIT makes this init
 * dumpable before the fork (its owner reads /proc/PID/environ and /proc/PID/ns/, as
 * flatpak enter does with bwrap's child-pid; nothing in the domain can reach it). The
 * init reaps orphans, forwards SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2 to the
 * command, and reports on the status pipe, 4-byte little-endian words:
 *   STARTED                   the command was exec'd
 *   FAILED, STAGE, OP, ERRNO  setup failed (the command never ran): the native
 *                             executor's failure record (enum psb_stage; OP the index
 *                             in the memfd's op array, -1 for none)
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
#define NR_EXIT __NR_exit
#define NR_WAIT4 __NR_wait4
#define NR_FCNTL __NR_fcntl
#define NR_PRCTL __NR_prctl
#define NR_NEWFSTATAT __NR_newfstatat
#define NR_PIPE2 __NR_pipe2
#define NR_DUP2 __NR_dup2
#define NR_GETPID __NR_getpid
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
#define EACCES 13
#define EINVAL 22
#define EPERM 1

#define F_GET_SEALS 1034
#define SEALED 15   /* F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE */
#define W_STARTED 0x50534201
#define W_FAILED 0x50534202
#define MAX_RLIMITS 8
#define PLAN_MAX (4 << 20)   /* 32 seccomp programs of BPF_MAXINSNS, ops and strings */
#define MAX_OPS 4096

struct kstat {   /* x86_64 struct stat */
    unsigned long st_dev, st_ino, st_nlink;
    unsigned int st_mode, st_uid, st_gid, pad0;
    unsigned long st_rdev;
    long st_size, st_blksize, st_blocks;
    unsigned long times[6];
    long unused[3];
};
struct pollfd { int fd; short events, revents; };

static unsigned char planbuf[PLAN_MAX] __attribute__((aligned(16)));
static const struct psb_tail_hdr *hdr;
static const struct psb_op *ops;
static const char *strtab;
static long status_fd = -1;
static int rlimit_op[MAX_RLIMITS], nrlimits;

static int streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* The failure record, as the native child's: stage (enum psb_stage), op index, errno. */
static void __attribute__((noreturn)) fail(unsigned int stage, long op, long err)
{
    unsigned int words[4] = { W_FAILED, stage, (unsigned int)op, (unsigned int)err };
    sys6(NR_WRITE, status_fd, (long)words, sizeof words, 0, 0, 0);
    quit(126);
}

/* Whether string offset ``off`` (-1: none, if ``optional``) is inside the table and
 * NUL-terminated there. */
static int str_ok(int off, int optional)
{
    if (off < 0)
        return optional && off == -1;
    if (off >= hdr->strtab_len)
        return 0;
    for (long k = off; k < hdr->strtab_len; k++)
        if (strtab[k] == 0)
            return 1;
    return 0;
}

/* Whether ``off`` (-1: none) starts a list of absolute paths inside the table, each
 * NUL-terminated there, ended by an empty string (native/psb_landlock.h). */
static int list_ok(int off)
{
    if (off == -1)
        return 1;
    for (; str_ok(off, 0); off++) {
        if (strtab[off] == 0)
            return 1;
        if (strtab[off] != '/')
            return 0;
        while (strtab[off])
            off++;
    }
    return 0;
}

/* Read the plan memfd whole, only if sealed, and validate it as strictly as the native
 * executor trusts its array: every kind one of ours, every offset in bounds. A bad
 * array fails closed (stage PIPE, or OP at the first bad op: EINVAL). */
static void load_plan(long fd)
{
    if (fd < 3)
        fail(PSB_STAGE_PIPE, -1, EINVAL);
    long seals = sys6(NR_FCNTL, fd, F_GET_SEALS, 0, 0, 0, 0);
    if (seals < 0 || (seals & SEALED) != SEALED)
        fail(PSB_STAGE_PIPE, -1, EPERM);
    long got = 0, r;
    while (got < PLAN_MAX && (r = sys6(__NR_pread64, fd, (long)(planbuf + got), PLAN_MAX - got, got, 0, 0)) > 0)
        got += r;
    sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
    hdr = (const struct psb_tail_hdr *)planbuf;
    if (got < (long)sizeof *hdr || got >= PLAN_MAX || hdr->magic != PSB_PLAN_MAGIC || hdr->abi != PSB_ABI_VERSION ||
        hdr->nops < 0 || hdr->nops > MAX_OPS || hdr->strtab_len <= 0 ||
        got != (long)sizeof *hdr + (long)hdr->nops * (long)sizeof(struct psb_op) + hdr->strtab_len)
        fail(PSB_STAGE_PIPE, -1, EINVAL);
    ops = (const struct psb_op *)(planbuf + sizeof *hdr);
    strtab = (const char *)(ops + hdr->nops);
    if (strtab[hdr->strtab_len - 1] != 0 || (hdr->exec_mode & ~1) ||
        hdr->gate_fd < -1 || (hdr->gate_fd >= 0 && hdr->gate_fd < 3) || hdr->pty_fd < -1 ||
        (hdr->pty_fd >= 0 && hdr->pty_fd < 3) || (hdr->pty_stdio & ~7) || hdr->proxy_fd < -1 || hdr->notify_fd < -1)
        fail(PSB_STAGE_PIPE, -1, EINVAL);
    int inits = 0;
    for (int i = 0; i < hdr->nops; i++) {
        const struct psb_op *op = &ops[i];
        int ok = str_ok(op->c, 1) && str_ok(op->d, 1) && op->c == -1 && op->d == -1;
        switch (op->kind) {
        case PSB_OP_INIT:
            ok = ok && !inits++ && !hdr->exec_mode && op->a == -1 && op->b == -1;
            break;
        case PSB_OP_LISTEN: case PSB_OP_CAPS: case PSB_OP_NNP: case PSB_OP_MOUNT_PRIVATE:
            ok = ok && op->a == -1 && op->b == -1;
            break;
        case PSB_OP_LANDLOCK:   /* a: the writable destinations, absolute paths (or -1) */
            ok = ok && list_ok(op->a) && op->b == -1;
            break;
        case PSB_OP_RLIMIT:
            ok = ok && op->a == -1 && op->b == -1 && nrlimits < MAX_RLIMITS && op->n >= 0;
            if (ok)
                rlimit_op[nrlimits++] = i;
            break;
        case PSB_OP_SECCOMP:   /* a program of whole, aligned instructions inside the table */
            ok = ok && op->b == -1 && op->a >= 0 && op->a % 8 == 0 && op->n > 0 && op->n % 8 == 0 &&
                 op->n / 8 <= BPF_MAXINSNS && op->n <= hdr->strtab_len - op->a;
            break;
        case PSB_OP_RO_COVER: case PSB_OP_BIND_CHECK:
            ok = ok && op->a == -1 && str_ok(op->b, 0) && strtab[op->b] == '/';
            break;
        default:
            ok = 0;
        }
        if (!ok)
            fail(PSB_STAGE_OP, i, EINVAL);
    }
}

/* BIND_CHECK: EACCES is a parent bwrap made (0700, owned by the setup's uid) that keeps
 * this uid out; the command, with this uid and no capabilities, cannot reach the bind
 * either, so whatever is bound there is out of its reach too. */
static long bind_check(const struct psb_op *op)
{
    struct kstat st;
    long r = sys6(NR_NEWFSTATAT, AT_FDCWD, (long)(strtab + op->b), (long)&st, AT_SYMLINK_NOFOLLOW, 0, 0);
    if (r == -EACCES)
        return 0;
    if (r == 0 && ((long)st.st_dev != op->n || (long)st.st_ino != op->m))
        r = -40;   /* ELOOP: something was swapped in */
    return r;
}

/* One op: this init's own kinds here, the tail's by the shared executor. 0 or -errno. */
static long run_op(int i)
{
    const struct psb_op *op = &ops[i];
    /* MOUNT_PRIVATE (native/psb_tail.h): our user namespace's own mount namespace (bwrap
     * may have entered a second one, with --disable-userns or for devpts, that does not
     * own its mount namespace): its copies of bwrap's mounts are locked to the command. */
    switch (op->kind) {
    case PSB_OP_BIND_CHECK:
        return bind_check(op);
    case PSB_OP_RLIMIT:
        return 0;   /* applied right before the exec */
    }
    return psb_tail_op(op, strtab, hdr->proxy_fd, hdr->notify_fd);
}

/* The command's process, after its ops: terminal, signal mask, rlimits, exec. Returns
 * only on failure: its stage and errno, the op in *op. */
static unsigned int finish(const unsigned long *oldset, char *exe, char **cargv, char **envp, long *err, long *op)
{
    *op = -1;
    if (hdr->pty_fd >= 0) {
        long slave = psb_tail_pty(hdr->pty_fd, hdr->pty_winsize), r = slave;
        for (long fd = 0; r >= 0 && fd < 3; fd++)
            if (hdr->pty_stdio & (1L << fd))
                r = sys6(NR_DUP2, slave, fd, 0, 0, 0, 0);
        if (slave >= 0)
            sys6(NR_CLOSE, slave, 0, 0, 0, 0, 0);
        if ((*err = -r) > 0)
            return PSB_STAGE_PTY;
    }
    /* Signals stayed blocked through the terminal: a pty whose master could not be
     * handed over is hung up when we close the master, and its SIGHUP must not kill us
     * before the failure is reported. A SIGIO already pending (the launcher went) ends
     * us here, before anything of the command runs. */
    sys6(NR_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, (long)oldset, 0, 8, 0, 0);
    for (int k = 0; k < nrlimits; k++) {
        const struct psb_op *o = &ops[rlimit_op[k]];
        if ((*err = -psb_tail_rlimit(o->n, (unsigned long)o->m, (unsigned long)o->mode)) > 0) {
            *op = rlimit_op[k];
            return PSB_STAGE_OP;
        }
    }
    if (hdr->exec_mode) {
        /* No SIGIO for the command once it is us (bwrap keeps a copy of the pipe's write
         * end; the launcher may close its reader first). */
        long fl = sys6(NR_FCNTL, status_fd, F_GETFL, 0, 0, 0, 0);
        sys6(NR_FCNTL, status_fd, F_SETFL, fl & ~O_ASYNC, 0, 0, 0);
        unsigned int w = W_STARTED;   /* the status pipe is close-on-exec: the command never holds it */
        sys6(NR_WRITE, status_fd, (long)&w, sizeof w, 0, 0, 0);
    }
    *err = -psb_tail_exec(exe, 1, 0, cargv, envp);
    return PSB_STAGE_EXEC;
}

void __attribute__((noreturn, used)) psb_binit_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    /* First: nothing in the sandbox may ptrace us (already so: exec of an unreadable file). */
    sys6(NR_PRCTL, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
    if (argc < 4)
        quit(127);
    status_fd = parse(argv[1]);
    long self_fd = parse(argv[2]), plan_fd = parse(argv[3]);
    if (status_fd < 3)
        quit(127);
    sys6(NR_FCNTL, status_fd, F_SETFD, FD_CLOEXEC, 0, 0, 0);
    if (self_fd >= 3)
        sys6(NR_CLOSE, self_fd, 0, 0, 0, 0, 0);
    if (plan_fd >= 3)
        sys6(NR_FCNTL, plan_fd, F_SETFD, FD_CLOEXEC, 0, 0, 0);
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

    if (argc < 7 || !streq(argv[4], "--"))
        fail(PSB_STAGE_PIPE, -1, EINVAL);
    load_plan(plan_fd);
    char *exe = argv[5];
    char **cargv = argv + 6;
    const long keep[3] = { hdr->pty_fd, hdr->proxy_fd, hdr->notify_fd };
    for (int k = 0; k < 3; k++)
        if (keep[k] >= 0)
            sys6(NR_FCNTL, keep[k], F_SETFD, FD_CLOEXEC, 0, 0, 0);
    if (hdr->gate_fd >= 0)
        sys6(NR_FCNTL, hdr->gate_fd, F_SETFD, FD_CLOEXEC, 0, 0, 0);

    /* The launcher's gate before any op: a failure of ours is then always reported on the
     * status pipe to a launcher that holds our pidfd (never a gate it finds closed). */
    if (hdr->gate_fd >= 0 && psb_tail_gate(hdr->gate_fd) < 0)
        quit(125);
    long err, op;
    int i = 0;
    for (; i < hdr->nops && ops[i].kind != PSB_OP_INIT; i++)
        if ((err = -run_op(i)) > 0)
            fail(PSB_STAGE_OP, i, err);
    if (i == hdr->nops) {   /* exec mode: the command is exec'd here */
        unsigned int stage = finish(&oldset, exe, cargv, envp, &err, &op);
        fail(stage, op, err);
    }

    int epipe[2];
    long r = sys6(NR_PIPE2, (long)epipe, O_CLOEXEC, 0, 0, 0, 0);
    if (r < 0)
        fail(PSB_STAGE_OP, i, -r);
    /* Dumpable before the command's process exists, so its owner never finds us not yet
     * dumpable once the command runs; until the command's exec, after its Landlock
     * domain, only our code runs in the sandbox: from then on nothing of it can reach us. */
    for (int k = i + 1; k < hdr->nops; k++)
        if (ops[k].kind == PSB_OP_LANDLOCK)
            sys6(NR_PRCTL, PR_SET_DUMPABLE, 1, 0, 0, 0, 0);
    long cmd = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (cmd < 0)
        fail(PSB_STAGE_OP, i, -cmd);
    if (cmd == 0) {
        /* The command: nothing of the init's reaches it (status pipe closed). */
        sys6(NR_CLOSE, status_fd, 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
        unsigned int stage = 0;
        for (int k = i + 1; k < hdr->nops && !stage; k++)
            if ((err = -run_op(k)) > 0)
                stage = PSB_STAGE_OP, op = k;
        if (!stage)
            stage = finish(&oldset, exe, cargv, envp, &err, &op);
        unsigned int rec[3] = { stage, (unsigned int)op, (unsigned int)err };
        sys6(NR_WRITE, epipe[1], (long)rec, sizeof rec, 0, 0, 0);
        for (;;)
            sys6(NR_EXIT, 127, 0, 0, 0, 0, 0);
    }
    sys6(NR_CLOSE, epipe[1], 0, 0, 0, 0, 0);
    for (int k = 0; k < 3; k++)   /* the init never sends on them */
        if (keep[k] >= 0)
            sys6(NR_CLOSE, keep[k], 0, 0, 0, 0, 0);
    unsigned int rec[3];
    while ((r = sys6(NR_READ, epipe[0], (long)rec, sizeof rec, 0, 0, 0)) == -4 /* EINTR */)
        ;
    sys6(NR_CLOSE, epipe[0], 0, 0, 0, 0, 0);
    if (r == sizeof rec) {
        int st;
        sys6(NR_WAIT4, cmd, (long)&st, 0, 0, 0, 0);
        fail(rec[0], (int)rec[1], rec[2]);
    }
    unsigned int w = W_STARTED;
    sys6(NR_WRITE, status_fd, (long)&w, sizeof w, 0, 0, 0);

    psb_pid1_loop(cmd, status_fd, set & ~((1UL << (SIGCHLD - 1)) | (1UL << (SIGIO - 1))), 1);
}
