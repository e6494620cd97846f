/* The sandbox's pid-1 init, as a freestanding static program (no libc). build_native.py
 * compiles it and embeds the bytes in pysandbox._native; psb_child.c execs it from a sealed
 * memfd, so the init does not keep a copy of the caller's memory (and the setup child
 * can share the caller's memory instead of copying its page tables).
 *
 * Runs as pid 1 of the sandbox's pid namespace, no capabilities, every signal
 * blocked (inherited across exec): argv = {"psb-init", <command pid>, <status fd>,
 * <forwarded signal mask>, <dumpable>} (bit N-1: signal N; the set is chosen in
 * Python; dumpable "1" only when the command is in a Landlock domain that cannot
 * reach us, native/psb_landlock.h: then our owner may read /proc/PID/environ and
 * open /proc/PID/ns/, as with bwrap's pid 1). Every descriptor but the status fd is
 * closed after that prctl: one is the write end of the command's go pipe
 * (native/psb_child.c), so the command starts only once we are dumpable or not.
psb_pid1_loop (native/psb_pid1.h) reaps, forwards the signals of the mask to the
 * command, writes its raw wait status to the status fd and exits with its code
 * (128+N for a signal). argv[1] == "probe": exit 0 at once.
 *
 * argv[1] == "monitor": not an init but the launcher's lifetime monitor of an as_pid_1
 * sandbox, on the host with descriptors 3, 4 and 5 (native/psb_monitor.h says which);
 * exec'd by psb_monitor_start (native/psb_spawn.c) from this program's memfd. */

#if defined(__x86_64__)
#include "psb_pid1.h"
#include "psb_monitor.h"
PSB_START(psb_init_main);

#define NR_EXIT_GROUP __NR_exit_group
#define NR_PRCTL __NR_prctl
#define NR_CLOSE_RANGE __NR_close_range
#else
#error "psb_init: unsupported architecture"
#endif

#define PR_SET_DUMPABLE 4

void __attribute__((noreturn, used)) psb_init_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    if (argc >= 2 && argv[1][0] == 'p')
        quit(0);
    if (argc >= 2 && argv[1][0] == 'm')
        psb_monitor_loop();
    if (argc < 4)
        quit(127);
    long cmd = parse(argv[1]);
    long status_fd = parse(argv[2]);
    long fwd = parse(argv[3]);
    if (cmd <= 0 || status_fd < 0 || fwd < 0)
        quit(127);
    sys6(NR_PRCTL, PR_SET_DUMPABLE, argc >= 5 && argv[4][0] == '1' && argv[4][1] == 0, 0, 0, 0, 0);
    if (status_fd > 0)
        sys6(NR_CLOSE_RANGE, 0, status_fd - 1, 0, 0, 0, 0);
    sys6(NR_CLOSE_RANGE, status_fd + 1, ~0U, 0, 0, 0, 0);
    psb_pid1_loop(cmd, status_fd, (unsigned long)fwd, 0);
}
