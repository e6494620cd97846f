/* pysandbox native executor: Probes run by Python once per process, each in a throwaway child: namespaces and
 * procfs (psb_probe), mount_setattr, and the sealed memfd of the freestanding init
 * (psb_init_memfd, psb_probe_exec_init). Run in the caller's process, any privilege. */
#include "psb_internal.h"
#define PSB_LIBC
#include "psb_sys.h"   /* psb_utoa */
#include "_psb_init_blob.h"

/* Runs in a throwaway child cloned with ``clone_flags`` (new namespaces, all
 * capabilities there): try one capability. */
static int psb_probe_child(int what, const char *uid_map, const char *gid_map)
{
    if (what == PSB_PROBE_IDMAP) {
        if (psb_write_file_at(AT_FDCWD, "/proc/self/setgroups", "deny") != 0 ||
            psb_write_file_at(AT_FDCWD, "/proc/self/uid_map", uid_map) != 0 ||
            psb_write_file_at(AT_FDCWD, "/proc/self/gid_map", gid_map) != 0)
            return errno;
    } else if (what == PSB_PROBE_PROC) {
        if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) != 0)
            return errno;
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            return errno;
    } else if (what == PSB_PROBE_LOOPBACK) {
        if (psb_loopback_up() != 0)
            return errno;
    }
    return 0;
}

/* Runs fn(arg) in a throwaway child cloned with ``clone_flags`` that shares our memory
 * on a small stack of its own (CLONE_VM | CLONE_VFORK: we are suspended until it exits
 * or execs, so nothing of ours runs beside it, and every signal stays blocked meanwhile)
 * and reaps it. A fork would copy the caller's page tables and leave its pages
 * copy-on-write: the two probes of a command line's start were two forks of the Python
 * process. 0 or the child's exit code, else the errno. */
static int psb_probe_run(unsigned long clone_flags, int (*fn)(void *), void *arg)
{
    const size_t size = 64 * 1024;
    char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(fn, stack + size, (int)(clone_flags | CLONE_VM | CLONE_VFORK | SIGCHLD), arg);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, size);   /* the child has exited or exec'd: its stack is unused */
    if (pid < 0)
        return err ? err : EINVAL;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return errno;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
}

struct psb_probe_arg {
    int what;
    const char *uid_map, *gid_map;
};

static int psb_probe_entry(void *p)
{
    const struct psb_probe_arg *a = p;
    _exit(psb_probe_child(a->what, a->uid_map, a->gid_map));
}

/* Runs in the caller's process, any privilege: 0 when a child can be cloned with
 * ``clone_flags`` and do ``what`` there, else the errno. Costs one clone. */
int psb_probe(unsigned long clone_flags, int what)
{
    /* The identity map of the caller's ids, as the default policy asks for. */
    char uid_map[64], gid_map[64];
    psb_fmt_map(uid_map, geteuid());
    psb_fmt_map(gid_map, getegid());
    struct psb_probe_arg arg = { what, uid_map, gid_map };
    return psb_probe_run(clone_flags, psb_probe_entry, &arg);
}

/* Runs in the caller's process: 1 when the kernel has mount_setattr (an invalid
 * call answers EBADF/EINVAL, not ENOSYS). */
int psb_mount_setattr_works(void)
{
    struct psb_mount_attr attr = { 0, 0, 0, 0 };
    return psb_sys_mount_setattr(-1, "", 0, &attr) == 0 || errno != ENOSYS;
}

/* Runs in the caller's process: a sealed memfd holding the freestanding init, or
 * -errno. Called once per process by the backend. */
int psb_init_memfd(void)
{
#if PSB_HAS_EXEC_INIT
    int fd = (int)syscall(SYS_memfd_create, "psb-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | 0x0010U /* MFD_EXEC */);
    if (fd < 0 && errno == EINVAL)
        fd = (int)syscall(SYS_memfd_create, "psb-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    /* Execute-only: a program that its process cannot read is exec'd non-dumpable
     * (the kernel's would_dump), so the sandbox cannot ptrace its init even in the
     * instant before the init's own PR_SET_DUMPABLE. */
    if (psb_write_all(fd, (const char *)psb_init_blob_data, psb_init_blob_len) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0 ||
        fchmod(fd, 0111) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    /* Keep an O_PATH descriptor, not the writable one (exec of a file open for
     * writing is ETXTBSY on many kernels). */
    char path[64] = "/proc/self/fd/";
    path[14 + psb_utoa(path + 14, (unsigned int)fd)] = '\0';
    int pfd = open(path, O_PATH | O_CLOEXEC);
    if (pfd >= 0) {
        close(fd);
        fd = pfd;
    }
    return fd;
#else
    return -ENOSYS;
#endif
}

static int psb_exec_probe_entry(void *p)
{
    char *argv[] = { "psb-init", "probe", NULL };
    char *envp[] = { NULL };
    syscall(SYS_execveat, *(const int *)p, "", argv, envp, AT_EMPTY_PATH);
    _exit(errno ? errno : 1);
}

/* Runs in the caller's process: 0 when the init can be exec'd from its memfd here
 * (memfd_noexec, an LSM or noexec policies may forbid it), else the errno. */
int psb_probe_exec_init(int init_fd)
{
    return psb_probe_run(0, psb_exec_probe_entry, &init_fd);
}
