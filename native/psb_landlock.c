/* pysandbox native executor: the command's Landlock domain (native/psb_landlock.h says
 * why and which kinds) as the LANDLOCK op. */
#include "psb_internal.h"
#define PSB_LANDLOCK_LIBC
#include "psb_landlock.h"

/* Runs in the command's process after PR_SET_NO_NEW_PRIVS, no capabilities needed.
 * kind: PSB_LANDLOCK_FS or PSB_LANDLOCK_SIGNAL (the op's n). Returns 0 or -1 (errno). */
int psb_op_landlock(long kind)
{
    long r = psb_landlock_self(kind);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

/* The kernel's Landlock ABI version (LANDLOCK_CREATE_RULESET_VERSION), 0 without
 * Landlock or with it disabled. pysandbox/backends/landlock.py asks here, where the
 * module is loaded anyway, instead of importing ctypes on every start. */
long psb_landlock_abi(void)
{
    long v = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, 0, 0, 1, 0);
    return v > 0 ? v : 0;
}
