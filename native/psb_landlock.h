/* The command's Landlock domain: ONE implementation for every process that execs a
 * command next to an init of ours (the native executor, native/psb_landlock.c; the
 * bwrap backend's init, native/psb_bwrap_init.c; the session server's commands,
 * native/psb_session.c).
 * Define PSB_LIBC before including this with libc (native/psb_sys.h).
 *
 * Why: Landlock refuses every ptrace access check (security/landlock/task.c) from a
 * process inside a domain to one outside it or in an unrelated domain, whatever the
 * domain handles: ptrace, /proc/PID/{mem,environ,fd,map_files,cwd,root,ns},
 * pidfd_getfd, process_vm_readv/writev, kcmp. Our init stays outside the command's
 * domain, so it may be dumpable (its owner reads /proc/PID/environ and opens its
 * namespaces, as flatpak enter does with bwrap's child-pid) while nothing the command
 * starts can reach it, whatever its uid and capabilities (an undumpable init alone
 * does not stop a command that keeps CAP_SYS_PTRACE in the sandbox's user namespace).
 *
 * A domain must handle something. Which kind (pysandbox/backends/landlock.py decides,
 * once for every backend; docs/ARCHITECTURE.md, "Who can reach pid 1"):
 *   PSB_LANDLOCK_FS      (ABI 1) handles writing a file (WRITE_FILE; TRUNCATE from ABI 3;
 *                        REFER from ABI 2, granted beneath "/": a domain that does not
 *                        grant it refuses every cross-directory rename), granted beneath
 *                        each WRITABLE mount destination of the plan (a NUL-separated
 *                        list Python computes: pysandbox/backends/landlock.py
 *                        writable_destinations) and on each descriptor the command is
 *                        given that already allows it (psb_landlock_fd_rule: a write
 *                        mode or O_PATH file, a directory). Reading, executing, making
 *                        and removing are not handled: nothing changes for them. What it
 *                        stops: a file the mounts do not make writable, reached through
 *                        a magic link (/proc/self/fd/N, /dev/stdin: the path walk jumps
 *                        to the host's own mount, read-write), opened for writing, e.g.
 *                        a read-only stdin reopened (`echo x > /dev/stdin`: the caller's
 *                        file, written); and a FIFO or device on a read-only mount opened
 *                        for writing (EROFS covers regular files and directories only).
 *                        A rule goes only on the root of a writable mount
 *                        (psb_ll_mount_check). Rules attach to inodes: a writable bind
 *                        of a host directory covers that host directory's files reached
 *                        any way (writable in the sandbox anyway); a writable bind of
 *                        the host's "/" covers every host file (pybwrap --bind / /: such
 *                        a policy is not protected); a read-only mount nested in a
 *                        writable one takes its rule (a FIFO there stays writable).
 *                        A domain that handles any filesystem right
 *                        forbids mount and pivot_root: for a command that cannot mount.
 *   PSB_LANDLOCK_SIGNAL  (ABI 6) handles no access right and scopes signals: the command
 *                        cannot signal a process outside its domain (the init, a
 *                        session's server and keepers); mount, pivot_root and nested
 *                        user namespaces work. For a command that may mount. (Not the
 *                        abstract-socket scope: with network=allow it would cut the
 *                        host's abstract sockets off.)
 *   PSB_LANDLOCK_SIGNAL_FS  (ABI 6) both: a command that cannot mount.
 *
 * Runs in the command's process before its exec, with PR_SET_NO_NEW_PRIVS set (the
 * kernel's condition without CAP_SYS_ADMIN). Returns 0 or -errno. */
#ifndef PSB_LANDLOCK_H
#define PSB_LANDLOCK_H

#include "psb_sys.h"
#ifdef PSB_LIBC
#include <sys/statfs.h>
#endif
#define psb_ll_sys(n, a, b, c, d) psb_sys((n), (a), (b), (c), (d), 0)
#define PSB_NR_OPENAT __NR_openat
#define PSB_NR_CLOSE __NR_close
#define PSB_NR_LANDLOCK_CREATE_RULESET __NR_landlock_create_ruleset
#define PSB_NR_LANDLOCK_ADD_RULE __NR_landlock_add_rule
#define PSB_NR_LANDLOCK_RESTRICT_SELF __NR_landlock_restrict_self
#define PSB_LANDLOCK_RULE_PATH_BENEATH 1
#define PSB_NR_OPENAT2 __NR_openat2
#define PSB_NR_STATX __NR_statx
#define PSB_LL_WRITE_FILE (1UL << 1)                    /* ABI 1 */
#define PSB_LL_REFER (1UL << 13)                        /* ABI 2 */
#define PSB_LL_TRUNCATE (1UL << 14)                     /* ABI 3 */
#define PSB_LL_FILE (PSB_LL_WRITE_FILE | PSB_LL_TRUNCATE)   /* the handled rights a file takes */
#define PSB_LANDLOCK_SCOPE_SIGNAL (1UL << 1)            /* ABI 6 */
#define PSB_LL_RESOLVE_NO_MAGICLINKS 0x02               /* openat2 */
#define PSB_LL_O_PATH 010000000

#define PSB_LANDLOCK_FS 1                      /* the kinds; pysandbox/backends/landlock.py */
#define PSB_LANDLOCK_SIGNAL 2
#define PSB_LANDLOCK_SIGNAL_FS 3

struct psb_ll {
    long rs;                 /* the ruleset, or -errno */
    unsigned long handled;   /* the filesystem rights it handles (0: none) */
};

/* One PATH_BENEATH rule on FD: RIGHTS (of the handled ones) on a directory; on anything
 * else the file rights among them (a file refuses directory rights: EINVAL). 0 or -errno. */
static long __attribute__((unused)) psb_landlock_rule(const struct psb_ll *ll, long fd, unsigned long rights)
{
    struct __attribute__((packed)) {
        unsigned long allowed_access;
        int parent_fd;
    } rule = { rights & ll->handled, (int)fd };
    long r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, ll->rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
    if (r == -22 /* EINVAL */ && (rule.allowed_access & ~PSB_LL_FILE)) {
        rule.allowed_access &= PSB_LL_FILE;
        r = rule.allowed_access ? psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, ll->rs, PSB_LANDLOCK_RULE_PATH_BENEATH,
                                             (long)&rule, 0) : 0;
    }
    return r;
}

/* The file type (S_IFMT bits) of FD itself (a symlink's own with O_PATH), or -errno. */
static long __attribute__((unused)) psb_ll_type(long fd)
{
    /* struct statx: stx_mode (u16) at byte 28 */
    unsigned char stx[256] __attribute__((aligned(8)));
    long r = psb_sys(PSB_NR_STATX, fd, (long)"", 0x1000 | 0x100 /* AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW */,
                     1 /* STATX_TYPE */, (long)stx);
    return r < 0 ? r : (long)(*(unsigned short *)(void *)(stx + 28) & 0170000);
}

/* Absolute PATH opened O_PATH one component at a time, following no symlink (magic
 * links included): the stricter walk where a seccomp filter of the caller's refuses
 * openat2 (ENOSYS). "." and ".." are refused (EINVAL). The descriptor or -errno. */
static long __attribute__((unused)) psb_ll_open_nofollow(const char *path)
{
    const long o_path = PSB_LL_O_PATH | 02000000 /* O_CLOEXEC */ | 0400000 /* O_NOFOLLOW */;
    long fd = psb_ll_sys(PSB_NR_OPENAT, -100, (long)"/", o_path | 0200000 /* O_DIRECTORY */, 0);
    const char *p = path;
    char name[256];
    while (fd >= 0) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        int n = 0;
        for (; p[n] && p[n] != '/'; n++)
            if (n < (int)sizeof name - 1)
                name[n] = p[n];
        name[n < (int)sizeof name - 1 ? n : (int)sizeof name - 1] = 0;
        p += n;
        while (*p == '/')
            p++;
        long next = -36;   /* ENAMETOOLONG */
        if (n < (int)sizeof name && !(name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))))
            next = psb_ll_sys(PSB_NR_OPENAT, fd, (long)name, o_path | (*p ? 0200000 : 0), 0);
        else if (n < (int)sizeof name)
            next = -22;   /* EINVAL */
        psb_ll_sys(PSB_NR_CLOSE, fd, 0, 0, 0);
        fd = next;
        if (fd >= 0 && !*p && psb_ll_type(fd) == 0120000 /* S_IFLNK */) {
            psb_ll_sys(PSB_NR_CLOSE, fd, 0, 0, 0);
            fd = -40;   /* ELOOP */
        }
    }
    return fd;
}

/* Whether the rule beneath FD may grant writing: 0 when FD is the root of a writable
 * mount (what every writable destination is once set up), 1 when its mount is read-only
 * (nothing to grant: a writable bind of a read-only filesystem), -EXDEV when it is no
 * mount's root (not what setup mounted there: a symlink swapped in, fail closed), or
 * -errno. A rule on anything else could reach further than the mounts (the sandbox's
 * "/" is the host's root inode). */
static long __attribute__((unused)) psb_ll_mount_check(long fd)
{
    /* struct statx: stx_attributes (u64) at byte 8, stx_attributes_mask (u64) at 56 */
    unsigned char stx[256] __attribute__((aligned(8)));
    long r = psb_sys(PSB_NR_STATX, fd, (long)"", 0x1000 | 0x100 /* AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW */,
                     1 /* STATX_TYPE */, (long)stx);
    if (r < 0)
        return r;
    const unsigned long mount_root = 0x2000;   /* STATX_ATTR_MOUNT_ROOT (5.8; Landlock: 5.13) */
    unsigned long attrs = *(unsigned long *)(void *)(stx + 8), mask = *(unsigned long *)(void *)(stx + 56);
    if ((mask & mount_root) && !(attrs & mount_root))
        return -18;   /* EXDEV */
#ifdef PSB_LIBC
    struct statfs sf;
    r = psb_ll_sys(__NR_fstatfs, fd, (long)&sf, 0, 0);
    unsigned long flags = r < 0 ? 0 : (unsigned long)sf.f_flags;
#else
    unsigned long sf[15];   /* x86_64 struct statfs (the freestanding programs' only architecture) */
    r = psb_ll_sys(__NR_fstatfs, fd, (long)sf, 0, 0);
    unsigned long flags = r < 0 ? 0 : sf[10];
#endif
    return r < 0 ? r : (flags & 1 /* ST_RDONLY */) ? 1 : 0;
}

/* The rule beneath PATH: every handled right (a writable mount's destination), if it is
 * the root of a writable mount (psb_ll_mount_check: a read-only one takes no rule).
 * Opened with openat2(RESOLVE), never through a magic link (where a filter of the
 * caller's answers openat2 ENOSYS, following no symlink at all: psb_ll_open_nofollow),
 * in the new root before the command runs (the one-shot paths; a session's commands use
 * the server's descriptors instead: psb_landlock_keep). A path the setup did not mount (ENOENT: an optional bind
 * whose source was missing) or one the command cannot reach (EACCES: a parent it may not
 * search, e.g. a tmpfs of mode 0) takes no rule. 0 or -errno. */
static long __attribute__((unused)) psb_landlock_path_rule(const struct psb_ll *ll, const char *path, unsigned long resolve)
{
    unsigned long how[3] = { PSB_LL_O_PATH | 02000000 /* O_CLOEXEC */, 0, resolve };
    long fd = psb_ll_sys(PSB_NR_OPENAT2, -100 /* AT_FDCWD */, (long)path, (long)how, sizeof how);
    if (fd == -38 /* ENOSYS */)   /* a filter of the caller's refuses openat2: no symlink at all */
        fd = psb_ll_open_nofollow(path);
    if (fd == -2 /* ENOENT */ || fd == -13 /* EACCES */)
        return 0;
    if (fd < 0)
        return fd;
    long r = psb_ll_mount_check(fd);
    if (r == 0)
        r = psb_landlock_rule(ll, fd, ll->handled);
    psb_ll_sys(PSB_NR_CLOSE, fd, 0, 0, 0);
    return r == 1 ? 0 : r;
}

/* A session server's step, before any command runs (the tree is what setup made: its
 * symlinks are followed as setup followed them): "/" (the REFER rule's place) into
 * OUT[0], then each of PATHS[N], the writable destinations, opened O_PATH and kept, each
 * checked the root of a writable mount (psb_ll_mount_check: a read-only one, ENOENT or
 * EACCES takes no descriptor; one setup did not make fails), into OUT[1..MAX). Every
 * command builds its rules from these (psb_landlock_kept): no path walk per command, and
 * nothing another command renames or plants moves a rule off the inode found here. The
 * descriptors are close-on-exec and the server's own: a command's process closes them
 * with everything it is not given, and nothing a command starts can reach the server's
 * /proc/1/fd (undumpable, and outside the command's domain). The count kept, or -errno
 * (ENFILE: more than MAX). */
static long __attribute__((unused)) psb_landlock_keep(char **paths, long n, int *out, long max)
{
    const long o_path = PSB_LL_O_PATH | 02000000 /* O_CLOEXEC */;
    long r = max < 1 ? -23 /* ENFILE */ : psb_ll_sys(PSB_NR_OPENAT, -100, (long)"/", o_path | 0200000 /* O_DIRECTORY */, 0);
    long at = 0;
    if (r >= 0)
        out[at++] = (int)r;
    for (long k = 0; r >= 0 && k < n; k++) {
        long fd = psb_ll_sys(PSB_NR_OPENAT, -100, (long)paths[k], o_path, 0);
        if (fd == -2 /* ENOENT */ || fd == -13 /* EACCES */)
            continue;
        r = fd < 0 ? fd : psb_ll_mount_check(fd);
        if (r == 0 && at == max)
            r = -23;   /* ENFILE */
        if (r == 0)
            out[at++] = (int)fd;
        else if (fd >= 0)
            psb_ll_sys(PSB_NR_CLOSE, fd, 0, 0, 0);
    }
    if (r >= 0)
        return at;
    while (at > 0)
        psb_ll_sys(PSB_NR_CLOSE, out[--at], 0, 0, 0);
    return r;
}

/* LL carries R (< 0: an earlier failure), its ruleset closed. */
static void __attribute__((unused)) psb_ll_fail(struct psb_ll *ll, long r)
{
    if (r < 0 && ll->rs >= 0) {
        psb_ll_sys(PSB_NR_CLOSE, ll->rs, 0, 0, 0);
        ll->rs = r;
    }
}

/* A ruleset of KIND; when it handles filesystem rights, REFER granted beneath "/": the
 * descriptor ROOT (a session server's, psb_landlock_keep), or (ROOT < 0) "/" opened here. */
static struct psb_ll __attribute__((unused)) psb_landlock_new(long kind, long root)
{
    /* struct landlock_ruleset_attr: handled_access_fs (ABI 1), handled_access_net
     * (ABI 4), scoped (ABI 6); the size given says which fields the kernel reads. */
    unsigned long attr[3] = { 0, 0, 0 };
    long size = sizeof attr[0];
    struct psb_ll ll = { -22 /* EINVAL */, 0 };
    if (kind < PSB_LANDLOCK_FS || kind > PSB_LANDLOCK_SIGNAL_FS)
        return ll;
    if (kind != PSB_LANDLOCK_SIGNAL) {
        long abi = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, 0, 0, 1 /* VERSION */, 0);
        if (abi < 1) {
            ll.rs = abi < 0 ? abi : -95 /* EOPNOTSUPP */;
            return ll;
        }
        attr[0] = PSB_LL_WRITE_FILE | (abi >= 2 ? PSB_LL_REFER : 0) | (abi >= 3 ? PSB_LL_TRUNCATE : 0);
    }
    if (kind != PSB_LANDLOCK_FS) {
        attr[2] = PSB_LANDLOCK_SCOPE_SIGNAL;
        size = sizeof attr;
    }
    ll.handled = attr[0];
    ll.rs = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, (long)attr, size, 0, 0);
    if (ll.rs >= 0 && (ll.handled & PSB_LL_REFER)) {   /* REFER everywhere: the root, however it is mounted */
        const struct psb_ll refer = { ll.rs, PSB_LL_REFER };
        long fd = root >= 0 ? root : psb_ll_sys(PSB_NR_OPENAT, -100, (long)"/", PSB_LL_O_PATH | 0200000 | 02000000, 0);
        long r = fd < 0 ? fd : psb_landlock_rule(&refer, fd, PSB_LL_REFER);
        if (root < 0 && fd >= 0)
            psb_ll_sys(PSB_NR_CLOSE, fd, 0, 0, 0);
        psb_ll_fail(&ll, r);
    }
    return ll;
}

/* A ruleset of KIND (psb_landlock_new) and, when it handles filesystem rights, every
 * handled right beneath each path of PATHS (NUL-separated, an empty string ends it;
 * NULL: none), each opened with RESOLVE (psb_landlock_path_rule). */
static struct psb_ll __attribute__((unused)) psb_landlock_create(long kind, const char *paths,
                                                                 unsigned long resolve)
{
    struct psb_ll ll = psb_landlock_new(kind, -1);
    long r = 0;
    for (const char *p = paths; ll.rs >= 0 && ll.handled && r == 0 && p && *p;) {
        r = psb_landlock_path_rule(&ll, p, resolve);
        while (*p)
            p++;
        p++;
    }
    psb_ll_fail(&ll, r);
    return ll;
}

/* The rule for a descriptor the command is given: a directory delegates what is beneath
 * it (every handled right: openat works on it without a sandbox too); a file open for
 * writing (or O_PATH, which the kernel lets any mode reopen) WRITE_FILE and TRUNCATE, as
 * its own mode allows; a read-only file none (no reopening it for writing). Pipes,
 * sockets, memfds and other kernel-internal files take no rule and need none (EBADFD:
 * Landlock never checks them), nor a closed slot (EBADF). 0 or -errno. */
static long __attribute__((unused)) psb_landlock_fd_rule(const struct psb_ll *ll, long fd)
{
    if (!ll->handled || fd < 0)
        return 0;
    long fl = psb_ll_sys(__NR_fcntl, fd, 3 /* F_GETFL */, 0, 0);
    if (fl < 0)
        return fl == -9 /* EBADF */ ? 0 : fl;
    long type = psb_ll_type(fd), r = 0;
    if (type < 0)
        return type;
    if (type == 0040000 /* S_IFDIR */)
        r = psb_landlock_rule(ll, fd, ll->handled);
    else if ((fl & PSB_LL_O_PATH) || (fl & 3))
        r = psb_landlock_rule(ll, fd, PSB_LL_FILE);
    return r == -77 /* EBADFD */ ? 0 : r;
}

/* Rules for every descriptor this process keeps across exec, read from /proc/self/fd
 * (where the executor's descriptors are already the command's: the bwrap init). No
 * procfs in the sandbox: no magic link to reopen a descriptor through, nothing to do. */
static long __attribute__((unused)) psb_landlock_fd_rules_all(const struct psb_ll *ll)
{
    if (!ll->handled)
        return 0;
    /* O_RDONLY | O_DIRECTORY | O_CLOEXEC */
    long dir = psb_ll_sys(PSB_NR_OPENAT, -100, (long)"/proc/self/fd", 0200000 | 02000000, 0);
    if (dir < 0)
        return dir == -2 /* ENOENT */ ? 0 : dir;
    char buf[2048] __attribute__((aligned(8)));
    long r = 0, n;
    while (r == 0 && (n = psb_ll_sys(__NR_getdents64, dir, (long)buf, sizeof buf, 0)) > 0) {
        for (long off = 0; off < n && r == 0;) {
            /* struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name */
            unsigned short reclen = *(unsigned short *)(void *)(buf + off + 16);
            const char *name = buf + off + 19;
            long fd = 0;
            int digits = 0;
            for (; *name >= '0' && *name <= '9'; name++, digits++)
                fd = fd * 10 + (*name - '0');
            /* close-on-exec: the init's own (its sockets), never the command's */
            if (digits && !*name && fd != dir && psb_ll_sys(__NR_fcntl, fd, 1 /* F_GETFD */, 0, 0) == 0)
                r = psb_landlock_fd_rule(ll, fd);
            off += reclen;
        }
    }
    if (r == 0 && n < 0)
        r = n;
    psb_ll_sys(PSB_NR_CLOSE, dir, 0, 0, 0);
    return r;
}

/* Enter the ruleset's domain and close it (also after an earlier failure: R). */
static long __attribute__((unused)) psb_landlock_restrict(struct psb_ll *ll, long r)
{
    if (ll->rs < 0)
        return ll->rs;
    if (r > 0)
        r = -22;   /* EINVAL: never a domain left out on a result that is no errno */
    if (r == 0)
        r = psb_ll_sys(PSB_NR_LANDLOCK_RESTRICT_SELF, ll->rs, 0, 0, 0);
    psb_ll_sys(PSB_NR_CLOSE, ll->rs, 0, 0, 0);
    return r;
}

/* The whole step, for an executor whose descriptors are already the command's: KIND's
 * domain with PATHS (psb_landlock_create), and a rule for each descriptor of FDS[NFDS],
 * or (NFDS < 0) of /proc/self/fd. */
static long __attribute__((unused)) psb_landlock_self(long kind, const char *paths, unsigned long resolve,
                                                      const int *fds, long nfds)
{
    struct psb_ll ll = psb_landlock_create(kind, paths, resolve);
    long r = 0;
    if (ll.rs >= 0 && nfds < 0)
        r = psb_landlock_fd_rules_all(&ll);
    for (long k = 0; ll.rs >= 0 && k < nfds && r == 0; k++)
        r = psb_landlock_fd_rule(&ll, fds[k]);
    return psb_landlock_restrict(&ll, r);
}

/* A session command's whole step (native/psb_session.c: in the command's process,
 * before it places its descriptors): KIND's domain from the server's descriptors
 * KEPT[NKEPT] (psb_landlock_keep: "/" first, then the writable mounts' roots, every
 * handled right beneath each: one add_rule each, no lookup) and a rule for each
 * descriptor of FDS[NFDS], the ones it is given (psb_landlock_fd_rule). 0 or -errno. */
static long __attribute__((unused)) psb_landlock_kept(long kind, const int *kept, long nkept, const long *fds,
                                                      long nfds)
{
    struct psb_ll ll = psb_landlock_new(kind, nkept > 0 ? kept[0] : -1);
    long r = 0;
    for (long k = 1; ll.rs >= 0 && ll.handled && k < nkept && r == 0; k++)
        r = psb_landlock_rule(&ll, kept[k], ll.handled);
    for (long k = 0; ll.rs >= 0 && k < nfds && r == 0; k++)
        r = psb_landlock_fd_rule(&ll, fds[k]);
    return psb_landlock_restrict(&ll, r);
}

#endif
