/* pysandbox native executor: the kernel's Landlock ABI, for pysandbox/backends/landlock.py
 * (the LANDLOCK op itself is native/psb_tail.h's, run by native/psb_child.c). */
#include "psb_internal.h"
#define PSB_LIBC
#include "psb_landlock.h"

/* The kernel's Landlock ABI version (LANDLOCK_CREATE_RULESET_VERSION), 0 without
 * Landlock or with it disabled. pysandbox/backends/landlock.py asks here, where the
 * module is loaded anyway, instead of importing ctypes on every start. */
long psb_landlock_abi(void)
{
    long v = psb_ll_sys(PSB_NR_LANDLOCK_CREATE_RULESET, 0, 0, 1, 0);
    return v > 0 ? v : 0;
}
