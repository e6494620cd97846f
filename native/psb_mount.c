/* pysandbox native executor: Mount primitives of the setup child: the openat2 resolver (psb_open_in,
 * psb_open_parent: paths resolved in the new root or beneath the host root, never
 * through a planted symlink), bind by open_tree/move_mount (psb_bind_fd), the
 * nosuid/nodev/read-only restriction by mount_setattr or remount (psb_restrict_fd),
 * and the one mkdir -p loop (psb_mkdirs_with) with its plain and in-root variants.
 * All of it runs in the cloned child, with CAP_SYS_ADMIN in its user namespace
 * unless a comment says otherwise. */
#include "psb_internal.h"
#define PSB_LIBC
#include "psb_sys.h"   /* psb_fstat, psb_stat */

/* Runs anywhere. */
int psb_sys_mount_setattr(int dfd, const char *path, unsigned int flags,
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

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: apply nosuid, nodev
 * (unless dev) and read-only (if ro) to the mount fd names and, when recursive, to
 * every mount below it. mount_setattr(AT_RECURSIVE) does it in one call; without it
 * (ENOSYS, or forced) the mount is remounted through its descriptor's magic link
 * and each submount listed by Python by its path. */
int psb_restrict_fd(struct psb_child *c, int fd, int ro, int dev, int recursive, const char *subs)
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
int psb_bind_fd(struct psb_child *c, int sfd, int dfd, const char *dst, int ro, int dev,
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
            if (psb_fstat(sfd, &want) != 0 || psb_fstat(tree, &got) != 0)
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
int psb_openat2(int dirfd, const char *rel, int flags, mode_t mode, uint64_t resolve)
{
    struct psb_open_how how = { (uint64_t)(flags | O_CLOEXEC), (flags & O_CREAT) ? mode : 0, resolve };
    return (int)syscall(__NR_openat2, dirfd, rel, &how, sizeof how);
}

/* Runs in the child, any privilege: the openat2 fallback, one component at a time,
 * O_NOFOLLOW, a symlink or ".." anywhere refused (ELOOP / EXDEV). O_PATH only. */
int psb_walk_nofollow(int dirfd, const char *rel)
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
        if (next >= 0 && psb_fstat(next, &st) == 0 && S_ISLNK(st.st_mode)) {
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

/* Runs in the child during setup: open path as above with flags (O_PATH unless
 * told), -1 with errno on failure (ELOOP: a symlink where none may be). */
int psb_open_in(struct psb_child *c, const char *path, int flags, mode_t mode, int nofollow)
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
int psb_open_parent(struct psb_child *c, const char *path, char buf[PATH_MAX], const char **leaf)
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
const char *psb_fd_path(char buf[64], int fd)
{
    memcpy(buf, "/oldroot/proc/self/fd/", 22);
    buf[22 + psb_utoa(buf + 22, (unsigned int)fd)] = '\0';
    return buf;
}

/* Runs in the child during setup, for an optional op (a hide of a path that may have
 * vanished from the host since the plan): 1 when path is missing only in its last
 * component (nothing left to hide), 0 otherwise (errno kept: fail closed). */
int psb_vanished(struct psb_child *c, const char *path)
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
    int gone = psb_fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    close(dir);
    errno = saved;
    return gone;
}

/* Runs in the child, any privilege: mkdir of one path whose parent exists; an
 * existing directory (or a symlink to one) is fine, another node is ENOTDIR. */
static int psb_mkdir_plain(struct psb_child *c, const char *path, mode_t mode)
{
    (void)c;
    if (mkdir(path, mode) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    struct stat st;
    if (psb_stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Runs in the child, any privilege: the one mkdir -p loop, with a stack buffer.
 * one() makes a single directory (psb_mkdir_plain, or psb_mkdir_one resolved in
 * the new root); the components before offset from are taken as there. The leaf is
 * tried first: it usually is the only missing part. */
static int psb_mkdirs_with(struct psb_child *c, const char *path, mode_t mode, mode_t parent_mode, size_t from,
                           int (*one)(struct psb_child *, const char *, mode_t))
{
    if (one(c, path, mode) == 0)
        return 0;
    if (errno != ENOENT)
        return -1;
    char buf[PATH_MAX];
    size_t len = psb_path_copy(buf, path);
    if (len == 0)
        return -1;
    for (size_t i = from; i < len; i++) {
        if (buf[i] == '/') {
            buf[i] = '\0';
            int r = one(c, buf, parent_mode);
            buf[i] = '/';
            if (r != 0)
                return -1;
        }
    }
    return one(c, path, mode);
}

/* Runs in the child, any privilege: mkdir -p of a path as the process sees it. */
static int psb_mkdirs(const char *path, mode_t mode, mode_t parent_mode)
{
    return psb_mkdirs_with(NULL, path, mode, parent_mode, 1, psb_mkdir_plain);
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
int psb_mkdirs_in(struct psb_child *c, const char *path, mode_t mode, mode_t parent_mode)
{
    if (!psb_under(path, "/newroot") || strcmp(path, "/newroot") == 0)
        return psb_mkdirs(path, mode, parent_mode);
    return psb_mkdirs_with(c, path, mode, parent_mode, sizeof "/newroot", psb_mkdir_one);
}

/* Runs in the child during setup: psb_mkfile in the new root. */
int psb_mkfile_in(struct psb_child *c, const char *path, mode_t parent_mode)
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
