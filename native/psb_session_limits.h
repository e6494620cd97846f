/* A session command's resource limits (pysandbox/session_limits.py), the server's side:
 * included by native/psb_session.c only. Runs in the session server (taking the frame)
 * and in the command's process (applying), never in the server or a keeper itself: the
 * rlimits bind the command and what it starts, not the processes that end it.
 *
 *   LIMITS (3): A = count of rlimits; payload: count x 5 u32 words
 *               RESOURCE SOFT_LO SOFT_HI HARD_LO HARD_HI
 *
 * It comes right before the SPAWN of the same ID, whose D word then carries
 * SPAWN_LIMITED: a SPAWN so marked without its LIMITS (a malformed or missing frame, or
 * another command's) fails with PSB_TAIL_RLIMIT and EINVAL, so a command that was meant
 * to run under limits never runs without them (fail closed). */
#ifndef PSB_SESSION_LIMITS_H
#define PSB_SESSION_LIMITS_H

#define T_LIMITS 3
#define SPAWN_LIMITED 0x80000000u
#define SESSION_MAX_RLIMITS 8

static unsigned long next_rl[SESSION_MAX_RLIMITS][3];
static unsigned int next_rl_id, next_rl_n;
static int next_rl_set;
/* The rlimits of the command being started: set by the server right before its fork
 * (the keeper and the command inherit the copy), cleared in the server right after. */
static unsigned int cur_rl_n;

/* Session server: hold a LIMITS frame for the SPAWN of its ID. -EINVAL: malformed (the
 * SPAWN marked SPAWN_LIMITED then fails). */
static int session_limits_take(const unsigned int *h, const char *data)
{
    unsigned int n = h[3], len = h[7];
    next_rl_set = 0;
    if (n > SESSION_MAX_RLIMITS || len != n * 20u)
        return -22;
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
    return ok;
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
