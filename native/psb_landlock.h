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
 *   PSB_LANDLOCK_FS      (ABI 1) handles every filesystem right the kernel's ABI knows,
 *                        all granted again beneath the sandbox's root "/", and on each
 *                        descriptor the command is given, what that descriptor's open mode
 *                        already allows (psb_landlock_fd_rule). Inside the sandbox nothing
 *                        changes (the mounts decide). What it stops: a file outside the
 *                        sandbox's tree reached through a magic link (/proc/self/fd/N,
 *                        /dev/stdin) opened with more than its descriptor allows, e.g. a
 *                        read-only stdin reopened for writing (`echo x > /dev/stdin`: the
 *                        caller's file, written). A domain that handles any filesystem
 *                        right forbids mount and pivot_root: for a command that cannot
 *                        mount. (Round 3 handled one right only, MAKE_BLOCK; on ABI 2 to 5
 *                        that also refused every cross-directory rename: REFER is denied
 *                        by any domain that does not grant it.)
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
#define psb_ll_sys(n, a, b, c, d) psb_sys((n), (a), (b), (c), (d), 0)
#define PSB_NR_OPENAT __NR_openat
#define PSB_NR_CLOSE __NR_close
#define PSB_NR_LANDLOCK_CREATE_RULESET __NR_landlock_create_ruleset
#define PSB_NR_LANDLOCK_ADD_RULE __NR_landlock_add_rule
#define PSB_NR_LANDLOCK_RESTRICT_SELF __NR_landlock_restrict_self
#define PSB_LANDLOCK_RULE_PATH_BENEATH 1
#define PSB_LL_EXECUTE (1UL << 0)
#define PSB_LL_WRITE_FILE (1UL << 1)
#define PSB_LL_READ_FILE (1UL << 2)
#define PSB_LL_ABI1 ((1UL << 13) - 1)                   /* EXECUTE .. MAKE_SYM */
#define PSB_LL_REFER (1UL << 13)                        /* ABI 2 */
#define PSB_LL_TRUNCATE (1UL << 14)                     /* ABI 3 */
#define PSB_LL_IOCTL_DEV (1UL << 15)                    /* ABI 5 */
#define PSB_LL_FILE (PSB_LL_EXECUTE | PSB_LL_WRITE_FILE | PSB_LL_READ_FILE | PSB_LL_TRUNCATE | PSB_LL_IOCTL_DEV)
#define PSB_LANDLOCK_SCOPE_SIGNAL (1UL << 1)            /* ABI 6 */

#define PSB_LANDLOCK_FS 1                      /* the kinds; pysandbox/backends/landlock.py */
#define PSB_LANDLOCK_SIGNAL 2
#define PSB_LANDLOCK_SIGNAL_FS 3

struct psb_ll {
    long rs;                 /* the ruleset, or -errno */
    unsigned long handled;   /* the filesystem rights it handles (0: none) */
};

/* A ruleset of KIND, with the rule beneath "/" when it handles filesystem rights. */
static struct psb_ll __attribute__((unused)) psb_landlock_create(long kind)
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
        attr[0] = PSB_LL_ABI1 | (abi >= 2 ? PSB_LL_REFER : 0) | (abi >= 3 ? PSB_LL_TRUNCATE : 0)
                  | (abi >= 5 ? PSB_LL_IOCTL_DEV : 0);
    }
    if (kind != PSB_LANDLOCK_FS) {
        attr[2] = PSB_LANDLOCK_SCOPE_SIGNAL;
        size = sizeof attr;
    }
    ll.handled = attr[0];
    ll.rs = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, (long)attr, size, 0, 0);
    if (ll.rs < 0 || !ll.handled)
        return ll;
    /* O_PATH | O_DIRECTORY | O_CLOEXEC */
    long root = psb_ll_sys(PSB_NR_OPENAT, -100 /* AT_FDCWD */, (long)"/", 010000000 | 0200000 | 02000000, 0);
    long r = root;
    if (root >= 0) {
        struct __attribute__((packed)) {
            unsigned long allowed_access;
            int parent_fd;
        } rule = { ll.handled, (int)root };
        r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, ll.rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
        psb_ll_sys(PSB_NR_CLOSE, root, 0, 0, 0);
    }
    if (r < 0) {
        psb_ll_sys(PSB_NR_CLOSE, ll.rs, 0, 0, 0);
        ll.rs = r;
    }
    return ll;
}

/* The rule for a descriptor the command is given: what its open mode allows (read:
 * READ_FILE and EXECUTE; write: WRITE_FILE and TRUNCATE, as ftruncate on it would;
 * IOCTL_DEV; O_PATH: every file right), every right for a directory (a directory
 * descriptor delegates what is beneath it: openat works on it without a sandbox too).
 * Pipes, sockets, memfds and other kernel-internal files take no rule and need none
 * (EBADFD: Landlock never checks them), nor a closed slot (EBADF). 0 or -errno. */
static long __attribute__((unused)) psb_landlock_fd_rule(const struct psb_ll *ll, long fd)
{
    if (!ll->handled || fd < 0)
        return 0;
    long fl = psb_ll_sys(__NR_fcntl, fd, 3 /* F_GETFL */, 0, 0);
    if (fl < 0)
        return fl == -9 /* EBADF */ ? 0 : fl;
    unsigned long file;
    if (fl & 010000000 /* O_PATH */)
        file = PSB_LL_FILE;
    else if ((fl & 3) == 0)
        file = PSB_LL_READ_FILE | PSB_LL_EXECUTE;
    else if ((fl & 3) == 1)
        file = PSB_LL_WRITE_FILE | PSB_LL_TRUNCATE;
    else
        file = PSB_LL_READ_FILE | PSB_LL_EXECUTE | PSB_LL_WRITE_FILE | PSB_LL_TRUNCATE;
    file |= PSB_LL_IOCTL_DEV;
    struct __attribute__((packed)) {
        unsigned long allowed_access;
        int parent_fd;
    } rule = { ll->handled, (int)fd };
    /* A directory first; a file refuses directory rights (EINVAL): its own rights then. */
    long r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, ll->rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
    if (r == -22 /* EINVAL */) {
        rule.allowed_access = file & ll->handled;
        r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, ll->rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
    }
    return r == -77 /* EBADFD */ || r == -9 /* EBADF */ ? 0 : r;
}

/* Rules for every descriptor this process holds, read from /proc/self/fd (where the
 * executor's descriptors are already the command's: the bwrap init, a session's command).
 * No procfs in the sandbox: no magic link to reopen a descriptor through, nothing to do. */
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
            if (digits && !*name && fd != dir)
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
    if (r == 0)
        r = psb_ll_sys(PSB_NR_LANDLOCK_RESTRICT_SELF, ll->rs, 0, 0, 0);
    psb_ll_sys(PSB_NR_CLOSE, ll->rs, 0, 0, 0);
    return r;
}

/* The whole step, for an executor whose descriptors are already the command's: KIND's
 * domain, with a rule for each descriptor of FDS[NFDS], or (NFDS < 0) of /proc/self/fd. */
static long __attribute__((unused)) psb_landlock_self(long kind, const int *fds, long nfds)
{
    struct psb_ll ll = psb_landlock_create(kind);
    long r = 0;
    if (ll.rs >= 0 && nfds < 0)
        r = psb_landlock_fd_rules_all(&ll);
    for (long k = 0; ll.rs >= 0 && k < nfds && r == 0; k++)
        r = psb_landlock_fd_rule(&ll, fds[k]);
    return psb_landlock_restrict(&ll, r);
}

#endif
