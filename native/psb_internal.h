/* Internal declarations shared by the executor's C files (psb_util.c, psb_mount.c,
 * psb_ops.c, psb_child.c, psb_spawn.c, psb_nsref.c, psb_probe.c); the public ones are in psb.h.
 *
 * pysandbox native executor.
 *
 * The parent (the Python process, any privilege) calls psb_spawn with a plan that
 * Python compiled once: a flat array of ops and a string table. psb_spawn clones
 * into the new namespaces; the child walks the array with no malloc, no stdio and
 * no strerror (it is a copy of a possibly multi-threaded process: only async-signal
 * safe calls are allowed). A failed step writes {stage, op index, errno} to an
 * O_CLOEXEC pipe and _exit(127)s; EOF on that pipe means the command was executed.
 *
 * Library code: never exit(), never print; return -1 with errno set.
 * Semantics follow bubblewrap (bubblewrap.c setup_newroot, bind-mount.c); the code
 * is ours. */
#ifndef PSB_INTERNAL_H
#define PSB_INTERNAL_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include "psb.h"

#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#define PSB_RESOLVE_NO_MAGICLINKS 0x02
#define PSB_RESOLVE_NO_SYMLINKS   0x04
#define PSB_RESOLVE_BENEATH       0x08
#define PSB_RESOLVE_IN_ROOT       0x10
#define PSB_MOUNT_ATTR_RDONLY 0x00000001
#define PSB_MOUNT_ATTR_NOSUID 0x00000002
#define PSB_MOUNT_ATTR_NODEV  0x00000004

struct psb_mount_attr {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};

struct psb_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

struct psb_record {
    int stage;
    int op;
    int err;
};

/* Child-side state. The child is a private copy of the parent's memory (no CLONE_VM),
 * so these statics are per child. */
#define PSB_MAX_RLIMITS 8

struct psb_child {
    const struct psb_plan *plan;
    const struct psb_launch *launch;
    char *const *argv;
    char *const *envp;
    int errfd;
    int lifeline;
    int status_fd;
    int proc_self_fd;     /* /proc/<pid> of the host procfs, for the nested id maps */
    int userns_sysctl_fd; /* /proc/sys/user/max_user_namespaces, or -errno */
    int start;            /* first op for the command's process after INIT */
    char *cmd_stack;      /* exec-init mode: stack top for the command's vfork */
    volatile int *failed; /* set before _exit by a process sharing our memory */
    volatile int cmd_failed;
    int parent_fds[4];    /* the parent's ends, closed first thing in the child */
    int gate_fd;          /* launch monitor: the go pipe's read end (psb_wait_gate), or -1 */
    int go_fd, go_wr;     /* exec-init mode: the command waits for EOF on go_fd */
    int last_hop;         /* index of the plan's last HOP op, or -1 */
    mode_t old_umask;     /* the caller's, restored before exec (setup runs with 0, as bwrap) */
    int oldroot_fd;       /* O_PATH of the host root (/oldroot) during setup, or -1 */
    int nrlimits;         /* RLIMIT ops recorded, set by psb_exec right before the exec */
    int rlimit_op[PSB_MAX_RLIMITS];
};

/* Per-step timings (psb_launch stamps): nothing at all unless the caller asked. */
static inline void psb_stamp(const struct psb_launch *l, int tag)
{
    long long *s = l->stamps;
    if (s == NULL)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long n = __atomic_fetch_add(&s[0], 1, __ATOMIC_RELAXED);
    if (n < PSB_STAMP_MAX) {
        s[1 + 2 * n] = tag;
        s[2 + 2 * n] = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
}

#define S(c, off) ((off) < 0 ? NULL : (c)->plan->strtab + (off))  /* optional string */
#define P(c, off) ((c)->plan->strtab + (off))                     /* required string */


/* psb_util.c */
int psb_record(struct psb_child *c, int stage, int op);
void psb_fail(struct psb_child *c, int stage, int op, int err);
int psb_write_all(int fd, const char *buf, size_t len);
int psb_write_file_at(int dirfd, const char *path, const char *text);
size_t psb_path_copy(char buf[PATH_MAX], const char *path);
int psb_copy_fd(int from, int to);
int psb_loopback_up(void);
void psb_fmt_map(char *buf, unsigned int id);

/* psb_mount.c */
int psb_sys_mount_setattr(int dfd, const char *path, unsigned int flags,
                                 struct psb_mount_attr *attr);
int psb_restrict_fd(struct psb_child *c, int fd, int ro, int dev, int recursive, const char *subs);
int psb_bind_fd(struct psb_child *c, int sfd, int dfd, const char *dst, int ro, int dev,
                       int recursive, const char *subs);
int psb_openat2(int dirfd, const char *rel, int flags, mode_t mode, uint64_t resolve);
int psb_walk_nofollow(int dirfd, const char *rel);
int psb_open_in(struct psb_child *c, const char *path, int flags, mode_t mode, int nofollow);
int psb_open_parent(struct psb_child *c, const char *path, char buf[PATH_MAX], const char **leaf);
const char *psb_fd_path(char buf[64], int fd);
int psb_vanished(struct psb_child *c, const char *path);
int psb_mkdirs_in(struct psb_child *c, const char *path, mode_t mode, mode_t parent_mode);
int psb_mkfile_in(struct psb_child *c, const char *path, mode_t parent_mode);

/* psb_ops.c */
int psb_op_write(struct psb_child *c, const struct psb_op *op);
int psb_op_symlink(struct psb_child *c, const char *target, const char *path);
int psb_op_setup_root(struct psb_child *c, const struct psb_op *op);
int psb_op_pivot(struct psb_child *c);
int psb_op_wait_fd(struct psb_child *c, const struct psb_op *op, int i);
void psb_wait_release(struct psb_child *c, int i);
void psb_wait_gate(struct psb_child *c, int i);
int psb_op_disable_userns(struct psb_child *c, const struct psb_op *op);
int psb_op_bind(struct psb_child *c, const struct psb_op *op);
int psb_op_mount(struct psb_child *c, const struct psb_op *op);
int psb_op_setattr(struct psb_child *c, const struct psb_op *op);
int psb_op_chmod(struct psb_child *c, const struct psb_op *op);
int psb_op_chdir(const struct psb_op *op, const char *path);

/* psb_child.c */
/* Runs in the cloned child: first with every capability in the new user namespace
 * (before CAPS), then none. Never returns. */
int psb_command_entry(void *arg);
int psb_setup_entry(void *arg);

/* psb_spawn.c */
/* Runs in the caller's process, on a launcher thread (below), any privilege. Blocks
 * until the command was executed or a step failed. */
int psb_spawn_run(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res,
                         char **argv, char **envp);
int psb_thread_start(void *(*fn)(void *), void *arg, size_t stack_size);

/* psb_nsref.c */
int psb_mntns_ref(const struct psb_plan *plan, pid_t pid);

#endif
