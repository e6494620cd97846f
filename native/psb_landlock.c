/* pysandbox native executor: the command's Landlock domain. Landlock's ptrace rule
 * (security/landlock/task.c) refuses every ptrace_may_access() check, in every mode,
 * from a process inside a domain to a process outside it or in an unrelated domain:
 * ptrace, /proc/PID/{mem,environ,fd,map_files,cwd,root,ns}, pidfd_getfd,
 * process_vm_readv/writev, kcmp. The sandbox's init stays outside the command's
 * domain, so the init may be dumpable (its owner can read /proc/PID/environ and open
 * /proc/PID/ns/*, as flatpak enter does with bwrap's child-pid) while nothing the
 * command starts can reach it, whatever its uid and capabilities. The domain restricts
 * nothing else: the one handled right (making a block device) is granted again beneath
 * the root. */
#include "psb_internal.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define PSB_LANDLOCK_CREATE_RULESET_VERSION 1U
#define PSB_LANDLOCK_RULE_PATH_BENEATH 1
#define PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK (1ULL << 11)   /* ABI 1 */

struct psb_landlock_ruleset_attr {
    uint64_t handled_access_fs;
};

struct psb_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

/* Runs in the caller's process, any privilege: the Landlock ABI version (>= 1), or 0
 * when the kernel lacks Landlock or has it disabled. */
int psb_landlock_abi(void)
{
    long v = syscall(SYS_landlock_create_ruleset, NULL, 0, PSB_LANDLOCK_CREATE_RULESET_VERSION);
    return v > 0 ? (int)v : 0;
}

/* Runs in the command's process after PR_SET_NO_NEW_PRIVS (landlock_restrict_self
 * needs it without CAP_SYS_ADMIN), no capabilities needed. Returns 0 or -1 (errno). */
int psb_op_landlock(void)
{
    struct psb_landlock_ruleset_attr attr = { PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK };
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0)
        return -1;
    int r = -1;
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root >= 0) {
        struct psb_landlock_path_beneath_attr rule = { PSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK, root };
        if (syscall(SYS_landlock_add_rule, rs, PSB_LANDLOCK_RULE_PATH_BENEATH, &rule, 0) == 0 &&
            syscall(SYS_landlock_restrict_self, rs, 0) == 0)
            r = 0;
    }
    int saved = errno;
    if (root >= 0)
        close(root);
    close(rs);
    errno = saved;
    return r;
}
