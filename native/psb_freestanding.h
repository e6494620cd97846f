/* Shared by the freestanding inits (native/psb_init.c, native/psb_bwrap_init.c): the
 * process entry point and a raw six-argument system call, with no libc. Each init
 * defines its own NR_* numbers. */
#ifndef PSB_FREESTANDING_H
#define PSB_FREESTANDING_H

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

#endif
