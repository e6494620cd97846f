/* The raw system call of the setup tail (native/psb_tail.h) and of the other units shared
 * between the executor (libc, any architecture) and the freestanding programs (x86_64,
 * no libc: native/psb_freestanding.h): psb_sys(n, a, b, c, d, e) returns the result or
 * -errno in both builds. Define PSB_LIBC before including this in the libc build.
 * System call numbers come from the kernel's headers (<asm/unistd.h>: __NR_*), never
 * written by hand. */
#ifndef PSB_SYS_H
#define PSB_SYS_H

#include <asm/unistd.h>

#ifdef PSB_LIBC
#include <errno.h>
#include <unistd.h>
static inline long psb_sys(long n, long a, long b, long c, long d, long e)
{
    long r = syscall(n, a, b, c, d, e, 0L);   /* every argument given: syscall() is variadic */
    return r < 0 ? -errno : r;
}
#else
#include "psb_freestanding.h"
#define psb_sys(n, a, b, c, d, e) sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#endif

#endif
