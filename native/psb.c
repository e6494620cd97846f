/* pysandbox native executor.
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
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
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
#include <unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include "psb.h"
#include "_psb_init_blob.h"

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
    int parent_fds[3];    /* the parent's ends, closed first thing in the child */
    int go_fd, go_wr;     /* exec-init mode: the command waits for EOF on go_fd */
    int last_hop;         /* index of the plan's last HOP op, or -1 */
    mode_t old_umask;     /* the caller's, restored before exec (setup runs with 0, as bwrap) */
    int oldroot_fd;       /* O_PATH of the host root (/oldroot) during setup, or -1 */
};

#define S(c, off) ((off) < 0 ? NULL : (c)->plan->strtab + (off))  /* optional string */
#define P(c, off) ((c)->plan->strtab + (off))                     /* required string */

/* Runs in the child: a record that is not a failure (PSB_OP_HOP). */
static int psb_record(struct psb_child *c, int stage, int op)
{
    struct psb_record rec = { stage, op, 0 };
    ssize_t w;
    do {
        w = write(c->errfd, &rec, sizeof rec);
    } while (w < 0 && errno == EINTR);
    return w == (ssize_t)sizeof rec ? 0 : -1;
}

/* Runs in the child, any privilege: report and die. */
static void psb_fail(struct psb_child *c, int stage, int op, int err)
{
    struct psb_record rec = { stage, op, err };
    ssize_t r;
    /* Flag first: once the record is out the parent may unmap the memory we share;
     * after the write nothing but _exit touches it. */
    if (c->failed != NULL)
        *c->failed = 1;
    do {
        r = write(c->errfd, &rec, sizeof rec);
    } while (r < 0 && errno == EINTR);
    _exit(127);
}

/* Runs in the child, any privilege. */
static int psb_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t r = write(fd, buf, len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Runs in the child, any privilege: write a short text to a file (id maps, sysctls). */
static int psb_write_file_at(int dirfd, const char *path, const char *text)
{
    int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = psb_write_all(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

/* Runs anywhere. */
static int psb_sys_mount_setattr(int dfd, const char *path, unsigned int flags,
                                 struct psb_mount_attr *attr)
{
#ifdef __NR_mount_setattr
    return (int)syscall(__NR_mount_setattr, dfd, path, flags, attr, sizeof *attr);
#else
    (void)dfd; (void)path; (void)flags; (void)attr;
    errno = ENOSYS;
    return -1;
#endif
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace. Remount one mount
 * point as a bind remount, keeping every flag it has (locked flags such as atime
 * must not change, or the kernel answers EPERM) and adding ``add``. */
static int psb_remount(const char *path, unsigned long add)
{
    struct statfs st;
    if (statfs(path, &st) != 0)
        return -1;
    unsigned long f = 0;
    if (st.f_flags & ST_RDONLY) f |= MS_RDONLY;
    if (st.f_flags & ST_NOSUID) f |= MS_NOSUID;
    if (st.f_flags & ST_NODEV) f |= MS_NODEV;
    if (st.f_flags & ST_NOEXEC) f |= MS_NOEXEC;
    if (st.f_flags & ST_SYNCHRONOUS) f |= MS_SYNCHRONOUS;
    if (st.f_flags & ST_MANDLOCK) f |= MS_MANDLOCK;
    if (st.f_flags & ST_NOATIME) f |= MS_NOATIME;
    if (st.f_flags & ST_NODIRATIME) f |= MS_NODIRATIME;
    if (st.f_flags & ST_RELATIME) f |= MS_RELATIME;
#ifdef ST_NOSYMFOLLOW
    if (st.f_flags & ST_NOSYMFOLLOW) f |= MS_NOSYMFOLLOW;
#endif
    if (!(f & (MS_NOATIME | MS_RELATIME)))
        f |= MS_STRICTATIME;
    if ((f | add) == f)
        return 0;
    return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | f | add, NULL);
}

static const char *psb_fd_path(char buf[64], int fd);
static int psb_open_in(struct psb_child *c, const char *path, int flags, mode_t mode, int nofollow);

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: apply nosuid, nodev
 * (unless dev) and read-only (if ro) to the mount fd names and, when recursive, to
 * every mount below it. mount_setattr(AT_RECURSIVE) does it in one call; without it
 * (ENOSYS, or forced) the mount is remounted through its descriptor's magic link
 * and each submount listed by Python by its path. */
static int psb_restrict_fd(struct psb_child *c, int fd, int ro, int dev, int recursive, const char *subs)
{
    if (!c->plan->no_mount_setattr) {
        struct psb_mount_attr attr = { 0, 0, 0, 0 };
        attr.attr_set = PSB_MOUNT_ATTR_NOSUID | (dev ? 0 : PSB_MOUNT_ATTR_NODEV) |
                        (ro ? PSB_MOUNT_ATTR_RDONLY : 0);
        if (psb_sys_mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr) == 0)
            return 0;
        if (errno != ENOSYS)
            return -1;
    }
    char path[64];
    psb_fd_path(path, fd);
    unsigned long add = MS_NOSUID | (dev ? 0 : MS_NODEV) | (ro ? MS_RDONLY : 0);
    if (psb_remount(path, add) != 0)
        return -1;
    if (!recursive || subs == NULL)
        return 0;
    for (const char *p = subs; *p; p += strlen(p) + 1) {
        if (psb_remount(p, add) != 0 && errno != EACCES && errno != ENOENT)
            return -1;
    }
    return 0;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: bind what descriptor
 * sfd names on what dfd names, by descriptor (open_tree + move_mount: no path is
 * walked again, so nothing can be swapped in between), then restrict it. dst: the
 * destination's plan path, only for kernels without open_tree. */
static int psb_bind_fd(struct psb_child *c, int sfd, int dfd, const char *dst, int ro, int dev,
                       int recursive, const char *subs)
{
    int tree = (int)syscall(__NR_open_tree, sfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH |
                            (recursive ? AT_RECURSIVE : 0));
    if (tree >= 0) {
        int r = (int)syscall(__NR_move_mount, tree, "", dfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
        /* The tree's descriptor names the new mount's root, now attached. */
        if (r == 0)
            r = psb_restrict_fd(c, tree, ro, dev, recursive, subs);
        if (r == 0) {
            struct stat want, got;   /* the inode bound is the one resolved */
            if (fstat(sfd, &want) != 0 || fstat(tree, &got) != 0)
                r = -1;
            else if (want.st_dev != got.st_dev || want.st_ino != got.st_ino) {
                errno = EXDEV;
                r = -1;
            }
        }
        int saved = errno;
        close(tree);
        errno = saved;
        return r;
    }
    if (errno != ENOSYS)
        return -1;
    /* Before 5.2: mount(2) through the descriptors' magic links (the files they
     * name, not paths), then the new mount found again in the new root. */
    char sp[64], dp[64];
    psb_fd_path(sp, sfd);
    psb_fd_path(dp, dfd);
    if (mount(sp, dp, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL) != 0)
        return -1;
    int top = psb_open_in(c, dst, O_PATH, 0, 0);
    if (top < 0)
        return -1;
    int r = psb_restrict_fd(c, top, ro, dev, recursive, subs);
    int saved = errno;
    close(top);
    errno = saved;
    return r;
}

/* Runs in the child: copy an absolute path into a PATH_MAX stack buffer; its length,
 * or 0 with errno ENAMETOOLONG when it does not fit. */
static size_t psb_path_copy(char buf[PATH_MAX], const char *path)
{
    size_t len = strlen(path);
    if (len >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return 0;
    }
    memcpy(buf, path, len + 1);
    return len;
}

/* Path resolution during setup (after SETUP_ROOT: the setup tmpfs is /, the host
 * root /oldroot, the new root /newroot). A path of the plan is never handed to the
 * kernel to walk as is: an earlier sandboxed command may have planted a symlink in
 * a writable host directory, and a walk from the setup root would follow it to any
 * host directory (an absolute target resolves against the setup root, whose
 * /oldroot is the host's /; "../.." climbs out of /newroot). Instead:
 *   - under /oldroot (host paths: bind sources, canonical since the Policy was
 *     built): beneath the host root, no symlink of any kind (ELOOP: fail closed);
 *   - under /newroot (destinations): in the new root, as bubblewrap 0.12, so a
 *     symlink resolves as the sandbox will see it and never leaves it; for a
 *     source there, no symlinks at all;
 *   - anything else is the setup tmpfs's own (only we write there): no final symlink.
 * The result is an O_PATH descriptor; mounts are made on it, not on the path.
 * Without openat2 (ENOSYS, before 5.6) each component is opened O_NOFOLLOW and a
 * symlink anywhere is ELOOP: stricter, never looser. */

/* Runs in the child, any privilege. */
static int psb_openat2(int dirfd, const char *rel, int flags, mode_t mode, uint64_t resolve)
{
    struct psb_open_how how = { (uint64_t)(flags | O_CLOEXEC), (flags & O_CREAT) ? mode : 0, resolve };
    return (int)syscall(__NR_openat2, dirfd, rel, &how, sizeof how);
}

/* Runs in the child, any privilege: the openat2 fallback, one component at a time,
 * O_NOFOLLOW, a symlink or ".." anywhere refused (ELOOP / EXDEV). O_PATH only. */
static int psb_walk_nofollow(int dirfd, const char *rel)
{
    char buf[PATH_MAX];
    if (psb_path_copy(buf, rel) == 0)
        return -1;
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return -1;
    char *save = NULL;
    for (char *part = strtok_r(buf, "/", &save); part != NULL; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        int next = -1;
        if (strcmp(part, "..") == 0)
            errno = EXDEV;
        else
            next = openat(cur, part, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (next >= 0 && fstat(next, &st) == 0 && S_ISLNK(st.st_mode)) {
            close(next);
            next = -1;
            errno = ELOOP;
        }
        int saved = errno;
        close(cur);
        errno = saved;
        if (next < 0)
            return -1;
        cur = next;
    }
    return cur;
}

/* Runs in the child: 1 when path is root or below it ("/oldroot", "/oldroot/x"). */
static int psb_under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Runs in the child during setup: the root descriptor and relative path for path
 * (see above); *resolve gets the openat2 resolve flags. Returns the root fd to
 * close (or -2 when none needs closing: oldroot's), -1 with errno on failure. */
static int psb_root_for(struct psb_child *c, const char *path, int nofollow, const char **rel,
                        uint64_t *resolve, int *rootfd)
{
    if (psb_under(path, "/oldroot")) {
        if (c->oldroot_fd < 0) {   /* before SETUP_ROOT or after PIVOT: never walk the host */
            errno = EBADF;
            return -1;
        }
        *rootfd = c->oldroot_fd;
        *resolve = PSB_RESOLVE_BENEATH | PSB_RESOLVE_NO_SYMLINKS | PSB_RESOLVE_NO_MAGICLINKS;
        path += 8;
    } else if (psb_under(path, "/newroot")) {
        /* Opened each time: a mount on the new root's / stacks over the old handle. */
        *rootfd = open("/newroot", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (*rootfd < 0)
            return -1;
        *resolve = PSB_RESOLVE_IN_ROOT | PSB_RESOLVE_NO_MAGICLINKS | (nofollow ? PSB_RESOLVE_NO_SYMLINKS : 0);
        path += 8;
        while (*path == '/')
            path++;
        *rel = *path ? path : ".";
        return *rootfd;
    } else {
        *rootfd = AT_FDCWD;
        *resolve = 0;
        *rel = path;
        return -2;
    }
    while (*path == '/')
        path++;
    *rel = *path ? path : ".";
    return -2;
}

static int psb_open_parent(struct psb_child *c, const char *path, char buf[PATH_MAX], const char **leaf);

/* Runs in the child during setup: open path as above with flags (O_PATH unless
 * told), -1 with errno on failure (ELOOP: a symlink where none may be). */
static int psb_open_in(struct psb_child *c, const char *path, int flags, mode_t mode, int nofollow)
{
    const char *rel;
    uint64_t resolve;
    int root;
    int owned = psb_root_for(c, path, nofollow, &rel, &resolve, &root);
    if (owned == -1)
        return -1;
    int fd;
    if (root == AT_FDCWD)
        fd = open(rel, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    else {
        fd = psb_openat2(root, rel, flags, mode, resolve);
        if (fd < 0 && errno == ENOSYS) {
            if (flags & O_CREAT) {
                /* The parent walked without symlinks, the leaf created O_NOFOLLOW. */
                char buf[PATH_MAX];
                const char *leaf;
                int dir = psb_open_parent(c, path, buf, &leaf);
                if (dir >= 0) {
                    fd = openat(dir, leaf, flags | O_NOFOLLOW | O_CLOEXEC, mode);
                    int saved = errno;
                    close(dir);
                    errno = saved;
                }
            } else {
                fd = psb_walk_nofollow(root, rel);
                if (fd >= 0 && !(flags & O_PATH)) {
                    errno = ENOSYS;
                    close(fd);
                    fd = -1;
                }
            }
        }
    }
    int saved = errno;
    if (owned >= 0)
        close(owned);
    errno = saved;
    return fd;
}

/* Runs in the child during setup: the parent directory of path, resolved as path
 * would be, and its last component in *leaf (a pointer into buf). */
static int psb_open_parent(struct psb_child *c, const char *path, char buf[PATH_MAX], const char **leaf)
{
    size_t len = psb_path_copy(buf, path);
    if (len == 0)
        return -1;
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL || slash[1] == '\0') {
        errno = EINVAL;
        return -1;
    }
    *leaf = slash + 1;
    if (slash == buf) {
        *slash = '\0';
        int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        *slash = '/';
        return fd;
    }
    *slash = '\0';
    int fd = psb_open_in(c, buf, O_PATH | O_DIRECTORY, 0, 0);
    int saved = errno;
    *slash = '/';
    errno = saved;
    return fd;
}

/* Runs in the child: "/oldroot/proc/self/fd/N" (the host procfs, reachable until the
 * final pivot) in buf, for calls that only take a path (remount, chmod, old
 * kernels' mount). The magic link names the descriptor's own file, not a path. */
static const char *psb_fd_path(char buf[64], int fd)
{
    char digits[16];
    int n = 0;
    unsigned int v = (unsigned int)fd;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(buf, "/oldroot/proc/self/fd/", 22);
    size_t len = 22;
    while (n > 0)
        buf[len++] = digits[--n];
    buf[len] = '\0';
    return buf;
}

/* Runs in the child during setup, for an optional op (a hide of a path that may have
 * vanished from the host since the plan): 1 when path is missing only in its last
 * component (nothing left to hide), 0 otherwise (errno kept: fail closed). */
static int psb_vanished(struct psb_child *c, const char *path)
{
    int saved = errno;
    if (saved != ENOENT)
        return 0;
    char buf[PATH_MAX];
    const char *leaf;
    int dir = psb_open_parent(c, path, buf, &leaf);
    if (dir < 0) {
        errno = saved;
        return 0;
    }
    struct stat st;
    int gone = fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    close(dir);
    errno = saved;
    return gone;
}

/* Runs in the child, any privilege: mkdir -p with a stack buffer. The leaf is
 * tried first: it usually is the only missing part. */
static int psb_mkdirs(const char *path, mode_t mode, mode_t parent_mode)
{
    if (mkdir(path, mode) == 0)
        return 0;
    if (errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) != 0)
            return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT)
        return -1;
    char buf[PATH_MAX];
    size_t len = psb_path_copy(buf, path);
    if (len == 0)
        return -1;
    for (size_t i = 1; i < len; i++) {
        if (buf[i] == '/') {
            buf[i] = '\0';
            if (mkdir(buf, parent_mode) != 0 && errno != EEXIST)
                return -1;
            buf[i] = '/';
        }
    }
    return mkdir(path, mode);
}

/* Runs in the child, any privilege: make sure a node exists at path (a mount point
 * for a file bind). Never truncates; an existing node of any kind is fine (O_EXCL
 * answers EEXIST before EROFS on a read-only bind). */
static int psb_mkfile(const char *path, mode_t parent_mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0444);
    if (fd < 0 && errno == ENOENT) {
        char buf[PATH_MAX];
        if (psb_path_copy(buf, path) == 0)
            return -1;
        char *slash = strrchr(buf, '/');
        if (slash != NULL && slash != buf) {
            *slash = '\0';
            if (psb_mkdirs(buf, parent_mode, parent_mode) != 0)
                return -1;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0444);
    }
    if (fd < 0)
        return errno == EEXIST ? 0 : -1;
    close(fd);
    return 0;
}

/* Runs in the child during setup: mkdir of path whose parent exists, resolved as
 * psb_open_in does; an existing directory (or a symlink to one, in the new root) is
 * fine. */
static int psb_mkdir_one(struct psb_child *c, const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    const char *leaf;
    int dir = psb_open_parent(c, path, buf, &leaf);
    if (dir < 0)
        return -1;
    int r = mkdirat(dir, leaf, mode);
    int saved = errno;
    close(dir);
    errno = saved;
    if (r == 0 || errno != EEXIST)
        return r;
    int fd = psb_open_in(c, path, O_PATH | O_DIRECTORY, 0, 0);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* Runs in the child during setup: mkdir -p of a path in the new root, every
 * component resolved in it (a planted symlink cannot send it to the host). */
static int psb_mkdirs_in(struct psb_child *c, const char *path, mode_t mode, mode_t parent_mode)
{
    if (!psb_under(path, "/newroot") || strcmp(path, "/newroot") == 0)
        return psb_mkdirs(path, mode, parent_mode);
    if (psb_mkdir_one(c, path, mode) == 0)
        return 0;
    if (errno != ENOENT)
        return -1;
    char buf[PATH_MAX];
    size_t len = psb_path_copy(buf, path);
    if (len == 0)
        return -1;
    for (size_t i = 9; i < len; i++) {
        if (buf[i] == '/') {
            buf[i] = '\0';
            int r = psb_mkdir_one(c, buf, parent_mode);
            buf[i] = '/';
            if (r != 0)
                return -1;
        }
    }
    return psb_mkdir_one(c, path, mode);
}

/* Runs in the child during setup: psb_mkfile in the new root. */
static int psb_mkfile_in(struct psb_child *c, const char *path, mode_t parent_mode)
{
    if (!psb_under(path, "/newroot"))
        return psb_mkfile(path, parent_mode);
    char buf[PATH_MAX];
    const char *leaf;
    int dir = psb_open_parent(c, path, buf, &leaf);
    if (dir < 0 && errno == ENOENT) {
        char parent[PATH_MAX];
        if (psb_path_copy(parent, path) == 0)
            return -1;
        char *slash = strrchr(parent, '/');
        if (slash != NULL && slash != parent) {
            *slash = '\0';
            if (psb_mkdirs_in(c, parent, parent_mode, parent_mode) != 0)
                return -1;
        }
        dir = psb_open_parent(c, path, buf, &leaf);
    }
    if (dir < 0)
        return -1;
    int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0444);
    int saved = errno;
    close(dir);
    if (fd < 0)
        return saved == EEXIST ? 0 : (errno = saved, -1);
    close(fd);
    return 0;
}

/* Runs in the child, any privilege: copy what a descriptor yields, to EOF. */
static int psb_copy_fd(int from, int to)
{
    char buf[4096];
    for (;;) {
        ssize_t r = read(from, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 0;
        if (psb_write_all(to, buf, (size_t)r) != 0)
            return -1;
    }
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace. */
static int psb_op_write(struct psb_child *c, const struct psb_op *op)
{
    const char *dst = S(c, op->b);
    const char *file = (op->flags & PSB_F_BIND) ? S(c, op->d) : dst;
    /* Modes as bwrap (umask 0 here): --file 0666, --bind-data 0600 (mkstemp), or the
     * op's mode; an existing --file destination keeps its mode (no chmod). */
    mode_t create = (op->flags & PSB_F_MODE) ? (mode_t)op->mode : (op->flags & PSB_F_BIND) ? 0600 : 0666;
    int fd = psb_open_in(c, file, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY, create, 0);
    if (fd < 0)
        return -1;
    int r = 0;
    if (op->m >= 0)
        r = psb_copy_fd((int)op->m, fd);
    else if (op->n > 0)
        r = psb_write_all(fd, S(c, op->a), (size_t)op->n);
    if (r == 0 && (op->flags & PSB_F_MODE) && (op->flags & PSB_F_BIND))
        r = fchmod(fd, (mode_t)op->mode);
    int saved = errno;
    close(fd);
    errno = saved;
    if (r != 0 || !(op->flags & PSB_F_BIND))
        return r;
    /* A hide (OPTIONAL) never creates its mount point: the node it covers is there,
     * or it vanished from the host since the plan (nothing left to hide). Anything
     * else that keeps it from being reached fails closed. */
    if (!(op->flags & PSB_F_OPTIONAL) && psb_mkfile_in(c, dst, 0700) != 0)
        return -1;
    int dfd = psb_open_in(c, dst, O_PATH, 0, 0);
    if (dfd < 0) {
        if ((op->flags & PSB_F_OPTIONAL) && psb_vanished(c, dst))
            return unlink(file);
        return -1;
    }
    int sfd = open(file, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0) {
        saved = errno;
        close(dfd);
        errno = saved;
        return -1;
    }
    r = psb_bind_fd(c, sfd, dfd, dst, op->flags & PSB_F_RO, 0, 0, NULL);
    saved = errno;
    close(sfd);
    close(dfd);
    errno = saved;
    if (r != 0)
        return -1;
    return unlink(file);
}

/* Runs in the child, any privilege: an existing identical symlink is fine. The
 * parent is resolved in the new root. */
static int psb_op_symlink(struct psb_child *c, const char *target, const char *path)
{
    char buf[PATH_MAX];
    const char *leaf;
    int dir = psb_open_parent(c, path, buf, &leaf);
    if (dir < 0)
        return -1;
    int r = symlinkat(target, dir, leaf);
    if (r != 0 && errno == EEXIST) {
        char got[PATH_MAX];
        ssize_t n = readlinkat(dir, leaf, got, sizeof got - 1);
        if (n >= 0) {
            got[n] = '\0';
            r = strcmp(got, target) == 0 ? 0 : -1;
        }
        errno = EEXIST;
    }
    int saved = errno;
    close(dir);
    errno = saved;
    return r;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace, before any mount op:
 * make / a slave (nothing propagates back to the host), mount the setup tmpfs on
 * base and pivot into it, leaving the host root at /oldroot (as bubblewrap). The
 * host procfs is still reachable: keep what DisableUserns will need from it. */
static int psb_op_setup_root(struct psb_child *c, const struct psb_op *op)
{
    const char *base = S(c, op->a);
    if (op->flags & PSB_F_USERNS_FDS) {
        c->proc_self_fd = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (c->proc_self_fd < 0)
            return -1;
        /* The user sysctls are per user namespace: opened now, from inside ours,
         * this is our namespace's limit. A failure is reported by DisableUserns,
         * so an earlier, more specific failure (proc) wins. */
        c->userns_sysctl_fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
        if (c->userns_sysctl_fd < 0)
            c->userns_sysctl_fd = -errno;
    }
    if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) != 0)
        return -1;
    /* No mode= (as bwrap): the sandbox sees this tmpfs's options under a bare root and
     * bind-data files; its root is never visible (newroot is a 0755 directory in it). */
    if (mount("tmpfs", base, "tmpfs", MS_NODEV | MS_NOSUID, NULL) != 0)
        return -1;
    if (chdir(base) != 0)
        return -1;
    if (mkdir("newroot", 0755) != 0 && errno != EEXIST)
        return -1;
    /* newroot must be a mount point for the second pivot_root. */
    if (mount("newroot", "newroot", NULL, MS_BIND | MS_REC | MS_NOSUID | MS_NODEV, NULL) != 0)
        return -1;
    if (mkdir("oldroot", 0755) != 0 && errno != EEXIST)
        return -1;
    if (syscall(SYS_pivot_root, base, "oldroot") != 0)
        return -1;
    if (chdir("/") != 0)
        return -1;
    /* Every host path of the plan is resolved beneath this (psb_open_in). */
    c->oldroot_fd = open("/oldroot", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return c->oldroot_fd < 0 ? -1 : 0;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace, after every mount op:
 * detach the host root and make newroot the root, so nothing of the host's tree
 * remains reachable (bubblewrap's second pivot_root(".", ".")). */
static int psb_op_pivot(struct psb_child *c)
{
    if (c->oldroot_fd >= 0) {
        close(c->oldroot_fd);
        c->oldroot_fd = -1;
    }
    /* rprivate first, or the detach would propagate unmount events to the host. */
    if (mount("oldroot", "oldroot", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    /* The sandbox's tree private too: SETUP_ROOT made / a slave, so a mount the host
     * makes later under a bound subtree would propagate in (read-write, devices
     * usable, whatever the bind's flags). Private: nothing propagates in or out. */
    if (mount(NULL, "/newroot", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    if (umount2("oldroot", MNT_DETACH) != 0)
        return -1;
    int oldrootfd = open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (oldrootfd < 0)
        return -1;
    if (chdir("/newroot") != 0)
        return -1;
    if (syscall(SYS_pivot_root, ".", ".") != 0)
        return -1;
    if (fchdir(oldrootfd) != 0)
        return -1;
    close(oldrootfd);
    if (umount2(".", MNT_DETACH) != 0)
        return -1;
    return chdir("/");
}

/* Runs in the child with CAP_NET_ADMIN in the new network namespace. */
static int psb_loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    int r = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (r == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(s);
    errno = saved;
    return r;
}

static void psb_fmt_map(char *buf, unsigned int id);

/* Runs in the child: wait for one byte (or EOF) on fd, then close it (a read error
 * other than EINTR fails the step). With lifeline the launcher's death ends the wait:
 * nobody is left to release us. */
static int psb_wait_byte(struct psb_child *c, int fd, int lifeline, int i)
{
    struct pollfd pfd[2] = { { fd, POLLIN, 0 }, { c->lifeline, POLLIN, 0 } };
    nfds_t n = lifeline ? 2 : 1;
    for (;;) {
        int r = poll(pfd, n, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (pfd[0].revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
        if (pfd[0].revents)
            break;
        if (n == 2 && (pfd[1].revents & (POLLHUP | POLLERR)))
            psb_fail(c, PSB_STAGE_PARENT_DIED, i, ESRCH);
    }
    char b;
    ssize_t got;
    do {
        got = read(fd, &b, 1);
    } while (got < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    errno = saved;
    return got < 0 ? -1 : 0;
}

/* WAIT_FD: bwrap's --userns-block-fd and --block-fd. */
static int psb_op_wait_fd(struct psb_child *c, const struct psb_op *op, int i)
{
    return psb_wait_byte(c, (int)op->n, (op->flags & PSB_F_LIFELINE) != 0, i);
}

/* Runs in the child, once its pid is reported (psb_launch.release_fd). Op index i is
 * where a failure is reported: the next op to run. */
static void psb_wait_release(struct psb_child *c, int i)
{
    if (c->launch->release_fd >= 0 && psb_wait_byte(c, c->launch->release_fd, 1, i) != 0)
        psb_fail(c, PSB_STAGE_OP, i, errno);
}

/* Runs in the child with full capabilities in the sandbox's user namespace, after
 * the last mount and the hostname (the nested namespace does not own them): limit
 * our namespace to one nested user namespace and enter it, as bwrap
 * --disable-userns, so no further user namespace can be created. */
static int psb_op_disable_userns(struct psb_child *c, const struct psb_op *op)
{
    if (op->n == 0)   /* only the nested namespace (bwrap's setup ids differ from the sandbox's) */
        goto nest;
    int fd = c->userns_sysctl_fd;
    if (fd < 0) {
        /* The host's /proc/sys was not usable; try the sandbox's own /proc. */
        fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            errno = c->userns_sysctl_fd < 0 ? -c->userns_sysctl_fd : errno;
            return -1;
        }
    }
    int r = psb_write_all(fd, "1", 1);
    close(fd);
    c->userns_sysctl_fd = -EBADF;
    if (r != 0)
        return -1;
nest:;
    char uid_map[32], gid_map[32];
    const char *um = S(c, op->a), *gm = S(c, op->b);
    if (op->flags & PSB_F_CURRENT_IDS) {
        /* The caller wrote our maps (--userns-block-fd): keep whatever ids they gave. */
        psb_fmt_map(uid_map, (unsigned int)geteuid());
        psb_fmt_map(gid_map, (unsigned int)getegid());
        um = uid_map;
        gm = gid_map;
    }
    if (unshare(CLONE_NEWUSER) != 0)
        return -1;
    if (psb_write_file_at(c->proc_self_fd, "setgroups", "deny") != 0)
        return -1;
    if (psb_write_file_at(c->proc_self_fd, "uid_map", um) != 0)
        return -1;
    if (psb_write_file_at(c->proc_self_fd, "gid_map", gm) != 0)
        return -1;
    close(c->proc_self_fd);
    c->proc_self_fd = -1;
    return 0;
}

/* Runs in the child with CAP_SETPCAP in its user namespace: clear the bounding and
 * ambient sets and keep only ``keep`` (a bit mask). Kept capabilities go in the
 * inheritable and ambient sets too, so they survive exec for a non-root uid (not with
 * PSB_F_NO_AMBIENT). */
static int psb_op_caps(const struct psb_op *op)
{
    uint64_t keep = (uint64_t)op->n;
    for (long cap = 0; cap <= op->m; cap++) {
        if (keep & (1ULL << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return -1;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        return -1;
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    data[0].effective = data[0].permitted = data[0].inheritable = (uint32_t)keep;
    data[1].effective = data[1].permitted = data[1].inheritable = (uint32_t)(keep >> 32);
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -1;
    for (long cap = 0; cap <= op->m && !(op->flags & PSB_F_NO_AMBIENT); cap++) {
        if ((keep & (1ULL << cap)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0)
            return -1;
    }
    return 0;
}

/* Runs in the sandbox's pid-1 process, no capabilities, after the fork of the
 * command: reap orphans, forward the usual termination signals to the command and
 * report its raw wait status on the status pipe (a pid-1 cannot die of a signal
 * it did not handle, so the parent learns -N from the pipe, not from our exit).
 * Every signal is blocked (inherited from psb_spawn): blocked signals are queued
 * even for a namespace init, so sigwaitinfo sees them. Never returns. */
static void psb_init(int cmd, int status_fd, unsigned long fwd_signals)
{
    /* This process is a copy of the caller's memory: make it undumpable so the
     * sandboxed command (same uid) cannot read it through /proc/1/mem or ptrace. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (status_fd > 0)
        syscall(SYS_close_range, 0, status_fd - 1, 0);
    syscall(SYS_close_range, status_fd + 1, ~0U, 0);
    sigset_t set;
    sigemptyset(&set);
    /* The forwarded signals are the caller's choice (launch fwd_signals, bit N-1 for
     * signal N); SIGCHLD is how we learn of exits. */
    for (int sig = 1; sig <= 64 && sig < NSIG; sig++)
        if (fwd_signals & (1UL << (sig - 1)))
            sigaddset(&set, sig);
    sigaddset(&set, SIGCHLD);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig < 0)
            continue;
        if (sig != SIGCHLD) {
            kill(cmd, sig);
            continue;
        }
        for (;;) {
            int st;
            pid_t p = waitpid(-1, &st, WNOHANG);
            if (p <= 0)
                break;
            if (p == cmd) {
                if (status_fd >= 0)
                    psb_write_all(status_fd, (const char *)&st, sizeof st);
                _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            }
        }
    }
}

/* Runs in the command's process, after the last op: stdio, descriptors, signal
 * state, exec. Only returns by failing. */
static void psb_exec(struct psb_child *c)
{
    const struct psb_launch *l = c->launch;
    int tmp[3];
    /* Move the caller's stdio out of 0..2 first: a source may be another's target. */
    for (int i = 0; i < 3; i++) {
        tmp[i] = fcntl(l->stdio[i], F_DUPFD_CLOEXEC, 3);
        if (tmp[i] < 0)
            psb_fail(c, PSB_STAGE_FDS, -1, errno);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(tmp[i], i) < 0)
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
    /* The candidates Python computed (pysandbox/execpath.py), tried in order. A name
     * that was not searched has one candidate and reports its own error. */
    const char *cand = l->cand;
    if (!l->searched) {
        execve(cand, c->argv, c->envp);
        psb_fail(c, PSB_STAGE_EXEC, -1, errno);
    }
    int seen_eacces = 0;
    for (int k = 0; k < l->ncand; k++, cand += strlen(cand) + 1) {
        execve(cand, c->argv, c->envp);
        if (errno == EACCES) {
            /* Only a file that is there but not executable makes it EACCES (as
             * a shell): an unreadable directory on PATH does not. */
            struct stat st;
            if (stat(cand, &st) == 0 && !S_ISDIR(st.st_mode))
                seen_eacces = 1;
        }
        else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
                 errno != ETIMEDOUT && errno != ENAMETOOLONG)
            psb_fail(c, PSB_STAGE_EXEC, -1, errno);
    }
    psb_fail(c, PSB_STAGE_EXEC, -1, seen_eacces ? EACCES : ENOENT);
}

/* Runs in the cloned child: first with every capability in the new user namespace
 * (before CAPS), then none. Never returns. */
static int psb_command_entry(void *arg);

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
    if (c->status_fd < 0 || fcntl(c->status_fd, F_SETFD, 0) == 0) {
        char pidbuf[16], fdbuf[16], sigbuf[24];
        char *argv[] = { "psb-init", pidbuf, fdbuf, sigbuf, NULL };
        char *envp[] = { NULL };
        char *p = pidbuf + sizeof pidbuf;
        unsigned int v = (unsigned int)cmd;
        *--p = '\0';
        do {
            *--p = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        argv[1] = p;
        p = fdbuf + sizeof fdbuf;
        v = (unsigned int)(c->status_fd >= 0 ? c->status_fd : 0);
        *--p = '\0';
        do {
            *--p = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        argv[2] = p;
        p = sigbuf + sizeof sigbuf;
        unsigned long m = c->launch->fwd_signals;
        *--p = '\0';
        do {
            *--p = (char)('0' + m % 10);
            m /= 10;
        } while (m);
        argv[3] = p;
        syscall(SYS_execveat, c->plan->init_fd, "", argv, envp, AT_EMPTY_PATH);
    }
    /* Kill the command's process before our exit closes the go pipe, so it can
     * never take EOF for a go. */
    int saved = errno;
    kill(cmd, SIGKILL);
    errno = saved;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: the recursive bind of
 * op a on op b, by descriptor. The source is resolved beneath the host root without
 * following any symlink: its path is the one the Policy canonicalised, so a symlink
 * there now was planted since (ELOOP, reported as symlink_in_path); nothing is
 * bound. m >= 0: a is the magic link of descriptor m, whose mount belongs to the
 * caller's mount namespace and cannot be cloned itself: as bwrap --bind-fd, bind
 * the path it names (under /oldroot), checked to be the descriptor's inode before
 * the bind (EXDEV otherwise: something was swapped in between). */
static int psb_op_bind(struct psb_child *c, const struct psb_op *op)
{
    const char *src = S(c, op->a);
    const char *dst = P(c, op->b);
    int optional = (op->flags & PSB_F_OPTIONAL) != 0;
    char buf[PATH_MAX];
    if (op->m >= 0) {
        memcpy(buf, "/oldroot", 8);
        ssize_t n = readlink(src, buf + 8, sizeof buf - 9);
        if (n < 0)
            return -1;
        if (n >= (ssize_t)(sizeof buf - 9) || buf[8] != '/') {
            errno = n >= (ssize_t)(sizeof buf - 9) ? ENAMETOOLONG : ENOENT;
            return -1;
        }
        buf[8 + n] = '\0';
        src = buf;
    }
    int sfd = psb_open_in(c, src, O_PATH, 0, 1);
    if (sfd < 0)
        return errno == ENOENT && optional ? 0 : -1;   /* bwrap --bind-try; proc entries a kernel lacks */
    if (op->m >= 0) {
        struct stat want, got;
        if (fstat((int)op->m, &want) != 0 || fstat(sfd, &got) != 0) {
            close(sfd);
            return -1;
        }
        if (want.st_dev != got.st_dev || want.st_ino != got.st_ino) {
            close(sfd);
            errno = EXDEV;
            return -1;
        }
    }
    int dfd = psb_open_in(c, dst, O_PATH, 0, 0);
    if (dfd < 0) {
        int saved = errno;
        close(sfd);
        errno = saved;
        return errno == ENOENT && optional ? 0 : -1;
    }
    int r = psb_bind_fd(c, sfd, dfd, dst, op->flags & PSB_F_RO, op->flags & PSB_F_DEV, 1, S(c, op->c));
    int saved = errno;
    close(sfd);
    close(dfd);
    errno = saved;
    return r;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: a new filesystem
 * (tmpfs, proc, devpts, mqueue, overlay) on the directory op b resolves to in the
 * new root (mounted on our cwd, that directory). OPTIONAL (a hide): a destination
 * that vanished from the host is skipped; any other failure to reach it fails. */
static int psb_op_mount(struct psb_child *c, const struct psb_op *op)
{
    const char *dst = P(c, op->b);
    int dfd = psb_open_in(c, dst, O_PATH | O_DIRECTORY, 0, 0);
    if (dfd < 0)
        return (op->flags & PSB_F_OPTIONAL) && psb_vanished(c, dst) ? 0 : -1;
    int r = fchdir(dfd);
    if (r == 0)
        r = mount(S(c, op->a), ".", S(c, op->c), (unsigned long)op->n, S(c, op->d));
    int saved = errno;
    close(dfd);
    if (chdir("/") != 0 && r == 0)
        return -1;
    errno = saved;
    return r;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: restrict the mount on
 * op b (resolved in the new root; its topmost mount). */
static int psb_op_setattr(struct psb_child *c, const struct psb_op *op)
{
    const char *dst = P(c, op->b);
    int dfd = psb_open_in(c, dst, O_PATH, 0, 0);
    if (dfd < 0)
        return (op->flags & PSB_F_OPTIONAL) && psb_vanished(c, dst) ? 0 : -1;
    int r = psb_restrict_fd(c, dfd, op->flags & PSB_F_RO, op->flags & PSB_F_DEV, 0, NULL);
    int saved = errno;
    close(dfd);
    errno = saved;
    return r;
}

/* Runs in the child with CAP_SYS_ADMIN in its user namespace. */
static int psb_op_chmod(struct psb_child *c, const struct psb_op *op)
{
    int fd = psb_open_in(c, P(c, op->b), O_PATH, 0, 0);
    if (fd < 0)
        return -1;
    char path[64];
    int r = chmod(psb_fd_path(path, fd), (mode_t)op->mode);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

/* Runs in the command's process, after the final pivot (our root is the sandbox's).
 * NOFOLLOW (the policy's workdir, canonical when the Policy was built): no symlink
 * in the path, so a symlink planted since cannot move the command elsewhere. */
static int psb_op_chdir(const struct psb_op *op, const char *path)
{
    if (!(op->flags & PSB_F_NOFOLLOW))
        return chdir(path);
    int fd = psb_openat2(AT_FDCWD, path, O_PATH | O_DIRECTORY, 0,
                         PSB_RESOLVE_NO_SYMLINKS | PSB_RESOLVE_NO_MAGICLINKS);
    if (fd < 0 && errno == ENOSYS) {
        int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            return -1;
        fd = psb_walk_nofollow(root, path);
        int saved = errno;
        close(root);
        errno = saved;
    }
    if (fd < 0)
        return -1;
    int r = fchdir(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
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
        case PSB_OP_HOSTNAME:
            r = sethostname(P(c, op->a), strlen(P(c, op->a)));
            break;
        case PSB_OP_DISABLE_USERNS:
            r = psb_op_disable_userns(c, op);
            break;
        case PSB_OP_CAPS:
            r = psb_op_caps(op);
            break;
        case PSB_OP_NNP:
            r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
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
        case PSB_OP_SECCOMP: {
            struct sock_fprog prog;
            prog.len = (unsigned short)(op->n / 8);
            prog.filter = (struct sock_filter *)(uintptr_t)S(c, op->a);
            r = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
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
            if (r == 0 && i == c->last_hop)
                psb_wait_release(c, i + 1);
            break;
        }
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
static int psb_command_entry(void *arg)
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
    psb_child_main(c, c->start);
    return 127;
}

/* Runs in the setup process in exec-init mode (sharing the caller's memory on its
 * own stack until it execs the init). */
static int psb_setup_entry(void *arg)
{
    struct psb_child *c = arg;
    close(c->parent_fds[0]);
    close(c->parent_fds[1]);
    if (c->parent_fds[2] >= 0)
        close(c->parent_fds[2]);
    for (int i = 0; i < c->launch->nclose; i++)
        close(c->launch->close_first[i]);
    c->old_umask = umask(0);   /* as bwrap: setup creates exact modes */
    if (c->last_hop < 0)
        psb_wait_release(c, 0);
    psb_child_main(c, 0);
    return 127;
}

/* Runs in the caller's process, on a launcher thread (below), any privilege. Blocks
 * until the command was executed or a step failed. */
static int psb_spawn_run(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res,
                         char **argv, char **envp);

static int psb_spawn_here(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res)
{
    res->pid = -1;
    res->status_fd = -1;
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

/* psb_spawn_here, once the argv/envp arrays exist. */
static int psb_spawn_run(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res,
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
            int saved = errno;
            close(errpipe[0]);
            close(errpipe[1]);
            close(lifeline[0]);
            close(lifeline[1]);
            if (status[0] >= 0) {
                close(status[0]);
                close(status[1]);
            }
            errno = saved;
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
    if (stacks != NULL) {
        pid = clone(psb_setup_entry, stacks + stack_size, (int)(plan->clone_flags | CLONE_VM | SIGCHLD), &c);
    } else {
        pid = (pid_t)syscall(SYS_clone, plan->clone_flags | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0)
            psb_setup_entry(&c);
    }
    int clone_errno = errno;
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
    if (pid < 0) {
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
        if (launch->started_fd >= 0 && --hops == 0) {
            int32_t v = (int32_t)pid;
            (void)psb_write_all(launch->started_fd, (const char *)&v, sizeof v);
        }
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
    if (got == 0) {
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
    if (got < sizeof rec) {
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

/* Any process, no stdio or malloc: "<id> <id> 1\n". */
static void psb_fmt_map(char *buf, unsigned int id)
{
    char digits[16];
    int n = 0;
    do {
        digits[n++] = (char)('0' + id % 10);
        id /= 10;
    } while (id);
    char *p = buf;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = n - 1; i >= 0; i--)
            *p++ = digits[i];
        *p++ = ' ';
    }
    memcpy(p, "1\n", 3);
}

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

/* Runs in the caller's process, any privilege: 0 when a child can be cloned with
 * ``clone_flags`` and do ``what`` there, else the errno. Costs one clone. */
int psb_probe(unsigned long clone_flags, int what)
{
    /* The identity map of the caller's ids, as the default policy asks for. */
    char uid_map[64], gid_map[64];
    psb_fmt_map(uid_map, geteuid());
    psb_fmt_map(gid_map, getegid());
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = (pid_t)syscall(SYS_clone, clone_flags | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        _exit(psb_probe_child(what, uid_map, gid_map));
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0)
        return err ? err : EINVAL;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return errno;
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return EINTR;
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
    char digits[16];
    int n = 0;
    unsigned int v = (unsigned int)fd;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t len = strlen(path);
    while (n > 0)
        path[len++] = digits[--n];
    path[len] = '\0';
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

/* Runs in the caller's process: 0 when the init can be exec'd from its memfd here
 * (memfd_noexec, an LSM or noexec policies may forbid it), else the errno. */
int psb_probe_exec_init(int init_fd)
{
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        char *argv[] = { "psb-init", "probe", NULL };
        char *envp[] = { NULL };
        syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
        _exit(errno ? errno : 1);
    }
    if (pid < 0)
        return errno;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return errno;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
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
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1024 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread starts with all blocked */
    pthread_t t;
    int err = pthread_create(&t, &attr, psb_worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
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
