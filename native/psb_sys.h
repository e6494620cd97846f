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
#include <fcntl.h>
#include <sys/stat.h>
/* stat(2) in the libc build: 0, or -1 with errno set, as fstatat. glibc 2.33 made stat,
 * fstat and fstatat functions of version GLIBC_2.33 (before, inline wrappers of __xstat),
 * which would make the module need that glibc; where the kernel has newfstatat (64-bit
 * architectures, whose struct stat is the kernel's) this calls it, as glibc 2.33 and
 * later do, fstat included ("" with AT_EMPTY_PATH). native/psb_glibc.h says why. */
static inline int psb_fstatat(int dir, const char *path, struct stat *st, int flags)
{
#ifdef __NR_newfstatat
    return (int)syscall(__NR_newfstatat, dir, path, st, flags);
#else
    return fstatat(dir, path, st, flags);
#endif
}
#define psb_stat(path, st) psb_fstatat(AT_FDCWD, (path), (st), 0)
#define psb_fstat(fd, st) psb_fstatat((fd), "", (st), AT_EMPTY_PATH)
#else
#include "psb_freestanding.h"
#define psb_sys(n, a, b, c, d, e) sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#endif

/* V in decimal at DST, no NUL; returns the number of digits (at most 20). Any process of
 * either build: no libc, async-signal-safe. The one formatter of the module's numbers
 * (descriptor paths, id maps, argv of the inits). */
static inline unsigned int psb_utoa(char *dst, unsigned long v)
{
    char digits[20];
    unsigned int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (unsigned int i = 0; i < n; i++)
        dst[i] = digits[n - 1 - i];
    return n;
}

#endif
