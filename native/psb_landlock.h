/* The command's Landlock domain: ONE implementation for every process that execs a
 * command next to an init of ours (the native executor, native/psb_landlock.c; the
 * bwrap backend's init, native/psb_bwrap_init.c; the session server's commands,
 * native/psb_session.c). Define PSB_LANDLOCK_LIBC before including this with libc.
 *
 * Why: Landlock refuses every ptrace access check (security/landlock/task.c) from a
 * process inside a domain to one outside it or in an unrelated domain: ptrace,
 * /proc/PID/{mem,environ,fd,map_files,cwd,root,ns}, pidfd_getfd,
 * process_vm_readv/writev, kcmp. Our init stays outside the command's domain, so it
 * may be dumpable (its owner reads /proc/PID/environ and opens its namespaces, as
 * flatpak enter does with bwrap's child-pid) while nothing the command starts can
 * reach it, whatever its uid and capabilities (an undumpable init alone does not stop
 * a command that keeps CAP_SYS_PTRACE in the sandbox's user namespace). The domain
 * restricts nothing else: its one handled right, making a block device, is granted
 * again beneath the root.
 *
 * Runs in the command's process before its exec, with PR_SET_NO_NEW_PRIVS set (the
 * kernel's condition without CAP_SYS_ADMIN). Returns 0 or -errno. */
#ifndef PSB_LANDLOCK_H
#define PSB_LANDLOCK_H

#ifdef PSB_LANDLOCK_LIBC
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
static long psb_ll_sys(long n, long a, long b, long c, long d)
{
    long r = syscall(n, a, b, c, d);   /* every argument given: syscall() is variadic */
    return r < 0 ? -errno : r;
}
#else
#include "psb_freestanding.h"
#define psb_ll_sys(n, a, b, c, d) sys6((n), (a), (b), (c), (d), 0, 0)
#endif

#define PSB_NR_OPENAT 257                      /* x86_64 */
#define PSB_NR_CLOSE 3
#define PSB_NR_LANDLOCK_CREATE_RULESET 444     /* the same on every architecture */
#define PSB_NR_LANDLOCK_ADD_RULE 445
#define PSB_NR_LANDLOCK_RESTRICT_SELF 446
#define PSB_LANDLOCK_CREATE_RULESET_VERSION 1
#define PSB_LANDLOCK_RULE_PATH_BENEATH 1
#define PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK (1UL << 11)   /* ABI 1 */

static long __attribute__((unused)) psb_landlock_self(void)
{
    unsigned long handled = PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK;   /* struct landlock_ruleset_attr, ABI 1 */
    long rs = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, (long)&handled, sizeof handled, 0, 0);
    if (rs < 0)
        return rs;
    /* O_PATH | O_DIRECTORY | O_CLOEXEC */
    long root = psb_ll_sys(PSB_NR_OPENAT, -100 /* AT_FDCWD */, (long)"/", 010000000 | 0200000 | 02000000, 0);
    long r = root;
    if (root >= 0) {
        struct __attribute__((packed)) {
            unsigned long allowed_access;
            int parent_fd;
        } rule = { handled, (int)root };
        r = psb_ll_sys(PSB_NR_LANDLOCK_ADD_RULE, rs, PSB_LANDLOCK_RULE_PATH_BENEATH, (long)&rule, 0);
        if (r == 0)
            r = psb_ll_sys(PSB_NR_LANDLOCK_RESTRICT_SELF, rs, 0, 0, 0);
        psb_ll_sys(PSB_NR_CLOSE, root, 0, 0, 0);
    }
    psb_ll_sys(PSB_NR_CLOSE, rs, 0, 0, 0);
    return r;
}

/* The Landlock ABI version (>= 1), or 0 without Landlock. Any process. */
static long __attribute__((unused)) psb_landlock_version(void)
{
    long v = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, 0, 0, PSB_LANDLOCK_CREATE_RULESET_VERSION, 0);
    return v > 0 ? v : 0;
}

#endif
