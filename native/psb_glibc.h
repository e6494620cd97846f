/* Forced into every C file of the module pysandbox._native (native/build_native.py passes
 * `-include native/psb_glibc.h`): binds the libc functions whose default symbol version
 * is newer than glibc 2.17 to their first version, so the one wheel built here loads on
 * every glibc from 2.17 on (tag manylinux_2_17 / manylinux2014 x86_64: RHEL 8 and 9,
 * Ubuntu 20.04; `.ci/packaging` requires that tag from `auditwheel`).
 *
 * Each line names a function the module calls whose current version came from a move,
 * not from a change of behaviour: glibc 2.32 (pthread_sigmask) and 2.34 (pthread_create,
 * pthread_attr_setstacksize) moved them from libpthread.so.0 into libc.so.6 under a new
 * version and kept the old one as an alias of the same code, so on a new glibc both
 * versions run the same function. On an old glibc the old version is found in
 * libpthread.so.0, which the module therefore names as a needed library
 * (build_native.py links it). memcpy@GLIBC_2.14 differs from memcpy@GLIBC_2.2.5 only
 * for overlapping buffers (the old one behaves as memmove): the module does not call
 * it, but the compiler may emit it for a structure copy.
 * stat, fstat and fstatat (GLIBC_2.33; before, inline wrappers of __xstat) are not
 * bound here: the module calls the kernel's newfstatat for them (psb_fstatat,
 * native/psb_sys.h), which is what glibc 2.33 and later do.
 *
 * No #include: this comes before the file's own `#define _GNU_SOURCE` and Python.h.
 * Only x86_64 glibc (GLIBC_2.2.5 is that architecture's first version; __gnu_linux__ is
 * GCC's and clang's mark of a glibc target); elsewhere the build host's versions stay. A
 * new call of a function versioned after 2.17 raises the tag: CI's packaging stage then
 * fails and names it (`auditwheel show`); add its line here or call the kernel. */
#if defined(__x86_64__) && defined(__gnu_linux__)
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.2.5");
__asm__(".symver memcpy,memcpy@GLIBC_2.2.5");
#endif
