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
 *   PSB_LANDLOCK_FS      (ABI 1) handles one right, making a block device, granted again
 *                        beneath the root: nothing else changes, but a domain that
 *                        handles any filesystem right forbids mount and pivot_root. For
 *                        a command that cannot mount anyway.
 *   PSB_LANDLOCK_SIGNAL  (ABI 6) handles no access right and scopes signals: the command
 *                        cannot signal a process outside its domain (the init, a
 *                        session's server and keepers); mount, pivot_root and nested
 *                        user namespaces work. For a command that may mount. (Not the
 *                        abstract-socket scope: with network=allow it would cut the
 *                        host's abstract sockets off.)
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
#define PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK (1UL << 11)   /* ABI 1 */
#define PSB_LANDLOCK_SCOPE_SIGNAL (1UL << 1)            /* ABI 6 */

#define PSB_LANDLOCK_FS 1                      /* the kinds; pysandbox/backends/landlock.py */
#define PSB_LANDLOCK_SIGNAL 2

static long __attribute__((unused)) psb_landlock_self(long kind)
{
    /* struct landlock_ruleset_attr: handled_access_fs (ABI 1), handled_access_net
     * (ABI 4), scoped (ABI 6); the size given says which fields the kernel reads. */
    unsigned long attr[3] = { 0, 0, 0 };
    long size = sizeof attr[0];
    if (kind == PSB_LANDLOCK_FS) {
        attr[0] = PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK;
    } else if (kind == PSB_LANDLOCK_SIGNAL) {
        attr[2] = PSB_LANDLOCK_SCOPE_SIGNAL;
        size = sizeof attr;
    } else {
        return -22;   /* EINVAL */
    }
    long rs = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, (long)attr, size, 0, 0);
    if (rs < 0)
        return rs;
    long r = 0;
    if (kind == PSB_LANDLOCK_FS) {
        /* O_PATH | O_DIRECTORY | O_CLOEXEC */
        long root = psb_ll_sys(PSB_NR_OPENAT, -100 /* AT_FDCWD */, (long)"/", 010000000 | 0200000 | 02000000, 0);
        r = root;
        if (root >= 0) {
            struct __attribute__((packed)) {
                unsigned long allowed_access;
                int parent_fd;
            } rule = { attr[0], (int)root };
            r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
            psb_ll_sys(PSB_NR_CLOSE, root, 0, 0, 0);
        }
    }
    if (r == 0)
        r = psb_ll_sys(PSB_NR_LANDLOCK_RESTRICT_SELF, rs, 0, 0, 0);
    psb_ll_sys(PSB_NR_CLOSE, rs, 0, 0, 0);
    return r;
}

#endif
