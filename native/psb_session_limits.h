/* A session command's resource limits (pysandbox/session_limits.py), the server's side:
 * included by native/psb_session.c only. Runs in the session server (taking the frame)
 * and in the command's process (applying), never in the server or a keeper itself: the
 * rlimits bind the command and what it starts, not the processes that end it.
 *
 *   LIMITS (3): A = count of rlimits, B = count of cgroup descriptors; payload: A x 5
 *               u32 words RESOURCE SOFT_LO SOFT_HI HARD_LO HARD_HI; B descriptors as
 *               SCM_RIGHTS: each the cgroup.procs of the command's own cgroup (opened
 *               for writing by the launcher, pysandbox/session_limits.py)
 *
 * It comes right before the SPAWN of the same ID, whose D word then carries
 * SPAWN_LIMITED: a SPAWN so marked without its LIMITS (a malformed or missing frame, or
 * another command's) fails with PSB_TAIL_RLIMIT and EINVAL, so a command that was meant
 * to run under limits never runs without them (fail closed). The command's process
 * moves itself into its cgroups (writes "0" to each cgroup.procs) first, before its
 * descriptors are placed and before it can fork: everything it starts is in them; the
 * keeper and the server are not. A write the kernel refuses: PSB_TAIL_CGROUP. */
#ifndef PSB_SESSION_LIMITS_H
#define PSB_SESSION_LIMITS_H

#define T_LIMITS 3
#define SPAWN_LIMITED 0x80000000u
#define SESSION_MAX_RLIMITS 8
#define SESSION_MAX_CGROUPS 4

static unsigned long next_rl[SESSION_MAX_RLIMITS][3];
static unsigned int next_rl_id, next_rl_n;
static int next_rl_set;
/* The rlimits of the command being started: set by the server right before its fork
 * (the keeper and the command inherit the copy), cleared in the server right after. */
static unsigned int cur_rl_n;
/* The held frame's cgroup.procs descriptors (the server's, close-on-exec), handed to the
 * command being started (cur_cg: the command's process writes and closes them). */
static long next_cg[SESSION_MAX_CGROUPS], cur_cg[SESSION_MAX_CGROUPS];
static int next_cg_n, cur_cg_n;

static void session_limits_drop(long *fds, int *n)
{
    for (int k = 0; k < *n; k++)
        sys6(__NR_close, fds[k], 0, 0, 0, 0, 0);
    *n = 0;
}

/* Session server: hold a LIMITS frame for the SPAWN of its ID. -EINVAL: malformed (the
 * SPAWN marked SPAWN_LIMITED then fails). */
static int session_limits_take(const unsigned int *h, const char *data, const long *fds, int nfds)
{
    unsigned int n = h[3], len = h[7];
    next_rl_set = 0;
    session_limits_drop(next_cg, &next_cg_n);
    if (n > SESSION_MAX_RLIMITS || len != n * 20u || h[4] > SESSION_MAX_CGROUPS || (unsigned int)nfds != h[4])
        return -22;
    for (int k = 0; k < nfds; k++) {   /* kept past the frame (frame() closes what came) */
        long fd = sys6(__NR_fcntl, fds[k], 1030 /* F_DUPFD_CLOEXEC */, 3, 0, 0, 0);
        if (fd < 0) {
            session_limits_drop(next_cg, &next_cg_n);
            return (int)fd;
        }
        next_cg[next_cg_n++] = fd;
    }
    const unsigned int *w = (const unsigned int *)data;
    for (unsigned int k = 0; k < n; k++, w += 5) {
        next_rl[k][0] = w[0];
        next_rl[k][1] = (unsigned long)w[1] | (unsigned long)w[2] << 32;
        next_rl[k][2] = (unsigned long)w[3] | (unsigned long)w[4] << 32;
    }
    next_rl_id = h[2], next_rl_n = n, next_rl_set = 1;
    return 0;
}

/* Session server, in spawn(): whether the SPAWN of `id` (its D word `d`) may run, and
 * the rlimits its command takes (cur_rl_n); the held frame is used once. */
static int session_limits_for(unsigned int id, unsigned int d)
{
    int ok = !(d & SPAWN_LIMITED) || (next_rl_set && next_rl_id == id);
    cur_rl_n = (d & SPAWN_LIMITED) && ok ? next_rl_n : 0;
    next_rl_set = 0;
    session_limits_drop(cur_cg, &cur_cg_n);   /* an earlier SPAWN that failed before its fork */
    if ((d & SPAWN_LIMITED) && ok)
        for (int k = 0; k < next_cg_n; k++)
            cur_cg[cur_cg_n++] = next_cg[k];
    else
        session_limits_drop(next_cg, &next_cg_n);
    next_cg_n = 0;
    return ok;
}

/* Session server right after the fork of the command's keeper, and the keeper right after
 * the fork of the command: their copies of the command's cgroup descriptors go (only the
 * command's process holds them, until it has written them). */
static void session_limits_forked(void)
{
    session_limits_drop(cur_cg, &cur_cg_n);
    cur_rl_n = 0;
}

/* The command's process, first (before its descriptors are placed, so no target can
 * replace one): into its own cgroups. 0 or -errno. */
static long session_limits_enter(void)
{
    for (int k = 0; k < cur_cg_n; k++) {
        long r;
        while ((r = sys6(__NR_write, cur_cg[k], (long)"0", 1, 0, 0, 0)) == -4 /* EINTR */)
            ;
        if (r < 0)
            return r;
    }
    /* Its own copies only: the keeper shares this memory (vfork semantics,
     * native/psb_session.c vfork_call), so cur_cg stays for session_limits_forked to
     * close the keeper's copies. */
    for (int k = 0; k < cur_cg_n; k++)
        sys6(__NR_close, cur_cg[k], 0, 0, 0, 0, 0);
    return 0;
}

/* The command's process, after its descriptors, before Landlock and exec: its rlimits
 * (the one implementation, native/psb_tail.h). 0, or -errno with *index the failed
 * one's (the FAILED event's step word carries it above bit 16). */
static long session_limits_apply(unsigned int *index)
{
    for (unsigned int k = 0; k < cur_rl_n; k++) {
        long r = psb_tail_rlimit((long)next_rl[k][0], next_rl[k][1], next_rl[k][2]);
        if (r < 0) {
            *index = k;
            return r;
        }
    }
    return 0;
}

#endif
