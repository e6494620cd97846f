/* pysandbox native executor: the command's Landlock domain (native/psb_landlock.h says
 * why), as the LANDLOCK op and as a probe. */
#include "psb_internal.h"
#define PSB_LANDLOCK_LIBC
#include "psb_landlock.h"

/* Runs in the caller's process, any privilege: the Landlock ABI version (>= 1), or 0
 * when the kernel lacks Landlock or has it disabled. */
int psb_landlock_abi(void)
{
    return (int)psb_landlock_version();
}

/* Runs in the command's process after PR_SET_NO_NEW_PRIVS, no capabilities needed.
 * Returns 0 or -1 (errno). */
int psb_op_landlock(void)
{
    long r = psb_landlock_self();
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}
