/* Shared by the freestanding programs (native/psb_init.c, native/psb_bwrap_init.c,
 * native/psb_session.c): the process entry point, a raw six-argument system call, exit
 * and argument parsing, with no libc. System call numbers come from <asm/unistd.h>. */
#ifndef PSB_FREESTANDING_H
#define PSB_FREESTANDING_H

#include <asm/unistd.h>

#if defined(__x86_64__)
/* _start: clear the frame pointer, hand the initial stack (argc, argv, envp) to MAIN. */
#define PSB_START(MAIN) \
    __asm__(".text\n.global _start\n_start:\n\txor %rbp,%rbp\n\tmov %rsp,%rdi\n\tand $-16,%rsp\n" \
            "\tcall " #MAIN "\n\thlt\n")

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#else
#error "the freestanding inits support x86_64 only"
#endif

/* The program's end: exit_group(code), never returning. */
static void __attribute__((noreturn, unused)) quit(int code)
{
    for (;;)
        sys6(__NR_exit_group, code, 0, 0, 0, 0, 0);
}

/* A descriptor number given as an argument: non-negative decimal digits; -1 for
 * anything else, the empty string and a missing argument included. */
static long __attribute__((unused)) parse(const char *s)
{
    long v = 0;
    if (s == 0 || *s == 0)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

#endif
