/* pysandbox native executor: The handlers of the plan's ops (psb_op_*), called by the child's op interpreter
 * (psb_child.c): write, symlink, setup_root and pivot, bind, mount, setattr, chmod,
 * chdir, the nested user namespace, and the waits on a descriptor.
 * They run in the cloned child; each says with which privilege. */
#include "psb_internal.h"
#define PSB_LIBC
#include "psb_tail.h"

/* Runs in the child with CAP_SYS_ADMIN in its user namespace. */
int psb_op_write(struct psb_child *c, const struct psb_op *op)
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
int psb_op_symlink(struct psb_child *c, const char *target, const char *path)
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
int psb_op_setup_root(struct psb_child *c, const struct psb_op *op)
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
int psb_op_pivot(struct psb_child *c)
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
    /* oldroot is not detached on its own: the one detach below takes the base tmpfs and
     * everything still mounted in it, oldroot's whole tree included (one umount, one RCU
     * grace period: issue 27's per-step timings). */
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
int psb_op_wait_fd(struct psb_child *c, const struct psb_op *op, int i)
{
    return psb_wait_byte(c, (int)op->n, (op->flags & PSB_F_LIFELINE) != 0, i);
}

/* Runs in the child, once its pid is reported (psb_launch.release_fd). Op index i is
 * where a failure is reported: the next op to run. */
void psb_wait_release(struct psb_child *c, int i)
{
    if (c->launch->release_fd >= 0 && psb_wait_byte(c, c->launch->release_fd, 1, i) != 0)
        psb_fail(c, PSB_STAGE_OP, i, errno);
}

/* Runs in the child (launch monitor: as_pid_1), once its pid is final and before any op
 * in its namespaces: wait for the launcher's go, written once the launcher's lifetime
 * monitor holds a pidfd of us (native/psb_monitor.h). Only the launcher holds the write
 * end: EOF means it is gone, and the command is never executed. No other process of
 * ours runs meanwhile: the launcher starts the monitor while we wait. */
void psb_wait_gate(struct psb_child *c, int i)
{
    if (c->gate_fd < 0)
        return;
    long r = psb_tail_gate(c->gate_fd);
    c->gate_fd = -1;
    if (r < 0)
        psb_fail(c, PSB_STAGE_PARENT_DIED, i, (int)-r);
}

/* Runs in the child with full capabilities in the sandbox's user namespace, after
 * the last mount and the hostname (the nested namespace does not own them): limit
 * our namespace to one nested user namespace and enter it, as bwrap
 * --disable-userns, so no further user namespace can be created. */
int psb_op_disable_userns(struct psb_child *c, const struct psb_op *op)
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

/* Runs in the child with CAP_SYS_ADMIN in its user namespace: the recursive bind of
 * op a on op b, by descriptor. The source is resolved beneath the host root without
 * following any symlink: its path is the one the Policy canonicalised, so a symlink
 * there now was planted since (ELOOP, reported as symlink_in_path); nothing is
 * bound. m >= 0: a is the magic link of descriptor m, whose mount belongs to the
 * caller's mount namespace and cannot be cloned itself: as bwrap --bind-fd, bind
 * the path it names (under /oldroot), checked to be the descriptor's inode before
 * the bind (EXDEV otherwise: something was swapped in between). */
int psb_op_bind(struct psb_child *c, const struct psb_op *op)
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
        if (psb_fstat((int)op->m, &want) != 0 || psb_fstat(sfd, &got) != 0) {
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
int psb_op_mount(struct psb_child *c, const struct psb_op *op)
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
int psb_op_setattr(struct psb_child *c, const struct psb_op *op)
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
int psb_op_chmod(struct psb_child *c, const struct psb_op *op)
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
int psb_op_chdir(const struct psb_op *op, const char *path)
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
