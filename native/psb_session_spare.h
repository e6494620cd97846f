/* The spare keeper of the session server (native/psb_session.c includes it once, after
 * keeper(), parse_spawn() and keeper_closes()): a keeper forked while the server is idle,
 * so that a SPAWN costs the server a sendmsg instead of a fork (issue 27: the fork of
 * the keeper was the largest part of a session command's cost above a plain spawn).
 *
 * The spare is made between frames (the main loop's top), never while a frame's
 * descriptors are open in the server, closes what a keeper closes (keeper_closes) and
 * any held LIMITS descriptors, and sleeps in recvmsg on a SOCK_SEQPACKET socketpair
 * with the server. It holds nothing a keeper does not: the channel (to report), its
 * report pipe, that socket. On a SPAWN the server sends it the frame (header, payload,
 * descriptors as SCM_RIGHTS) in one message and closes its end; the spare parses its
 * copy with the server's parse_spawn and becomes that command's keeper(). Then the
 * server makes the next spare at its loop's top.
 *
 * Only where each command's Landlock domain scopes signals (-L 2, PSB_LANDLOCK_SIGNAL):
 * a command cannot signal or trace the spare (outside its domain), so no command can
 * stop it to hang the next one. Elsewhere, and for a SPAWN with limits (LIMITS state,
 * cgroup descriptors) or a payload over SPARE_MAX_PAYLOAD, the keeper is forked as
 * before. A spare that is gone (the send fails, or it was reaped unused) is dropped and
 * the keeper forked. It dies with the server (PR_SET_PDEATHSIG; pid 1's namespace). */
#ifndef PSB_SESSION_SPARE_H
#define PSB_SESSION_SPARE_H

#define NR_SOCKETPAIR __NR_socketpair
#define NR_SENDMSG __NR_sendmsg
#define SPARE_MAX_PAYLOAD (60u << 10)   /* one datagram, well below the socket's buffer */
#define SOCK_SEQPACKET 5
#define MSG_NOSIGNAL 0x4000
#define MSG_DONTWAIT 0x40

static void spare_drop(void)
{
    sys6(NR_CLOSE, spare.rep, 0, 0, 0, 0, 0);
    sys6(NR_CLOSE, spare.sock, 0, 0, 0, 0, 0);
    spare.pid = 0;
}

/* The spare's life: wait for one SPAWN, then be its keeper. */
static void __attribute__((noreturn)) spare_wait(long rep, long sock)
{
    sys6(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    sys6(NR_PRCTL, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0, 0);
    unsigned int h[8];
    char control[sizeof(struct cmsghdr) + MAX_FDS * 4 + 16];
    struct iovec iov[2] = { { h, sizeof h }, { payload, SPARE_MAX_PAYLOAD } };
    struct msghdr m = { 0, 0, iov, 2, control, sizeof control, 0 };
    long r;
    while ((r = sys6(NR_RECVMSG, sock, (long)&m, MSG_CMSG_CLOEXEC, 0, 0, 0)) == -EINTR)
        ;
    sys6(NR_CLOSE, sock, 0, 0, 0, 0, 0);
    long fds[MAX_FDS];
    int nfds = 0;
    struct cmsghdr *c = (struct cmsghdr *)control;
    if (m.controllen >= sizeof *c && c->level == 1 /* SOL_SOCKET */ && c->type == 1 /* SCM_RIGHTS */) {
        int *p = (int *)(c + 1);
        for (unsigned long k = 0; k < (c->len - sizeof *c) / 4 && nfds < MAX_FDS; k++)
            fds[nfds++] = p[k];
    }
    /* The server checked this frame; a short or odd message (the server is gone) ends us. */
    if (r < (long)sizeof h || (unsigned long)r != sizeof h + h[7] || parse_spawn(h, nfds) < 0)
        quit(0);
    keeper(h[2], rep, h[3], h[4], nfds, (const unsigned int *)payload, fds, h[1] == T_SPAWN_QUIET);
}

/* At the main loop's top, when there is no spare: fork one. A failure is not an error
 * (the next SPAWN forks its keeper) and is not retried before that SPAWN. */
static void spare_make(void)
{
    spare_retry = 0;
    if (landlock_kind != PSB_LANDLOCK_SIGNAL)
        return;
    int rp[2], sp[2];
    if (sys6(NR_PIPE2, (long)rp, O_CLOEXEC | O_NONBLOCK, 0, 0, 0, 0) < 0)
        return;
    if (sys6(NR_SOCKETPAIR, 1 /* AF_UNIX */, SOCK_SEQPACKET | O_CLOEXEC, 0, (long)sp, 0, 0) < 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, rp[1], 0, 0, 0, 0, 0);
        return;
    }
    long k = sys6(NR_FORK, 0, 0, 0, 0, 0, 0);
    if (k == 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, sp[0], 0, 0, 0, 0, 0);
        keeper_closes();
        session_limits_drop(next_cg, &next_cg_n);   /* a held LIMITS frame's: not ours */
        session_limits_forked();
        spare_wait(rp[1], sp[1]);
    }
    sys6(NR_CLOSE, rp[1], 0, 0, 0, 0, 0);
    sys6(NR_CLOSE, sp[1], 0, 0, 0, 0, 0);
    if (k < 0) {
        sys6(NR_CLOSE, rp[0], 0, 0, 0, 0, 0);
        sys6(NR_CLOSE, sp[0], 0, 0, 0, 0, 0);
        return;
    }
    spare.pid = k, spare.rep = rp[0], spare.sock = sp[0];
}

/* In spawn(), the frame checked and a slot free: hand it to the spare, which becomes
 * its keeper in `slot`. 1 when handed; 0: fork the keeper as before. */
static int spare_take(int slot, const unsigned int *h, const long *fds, int nfds)
{
    if (!spare.pid || cur_rl_n || cur_cg_n || h[7] > SPARE_MAX_PAYLOAD)
        return 0;
    char control[sizeof(struct cmsghdr) + MAX_FDS * 4 + 16];
    struct iovec iov[2] = { { (void *)h, 32 }, { payload, h[7] } };
    struct msghdr m = { 0, 0, iov, 2, nfds ? control : 0, 0, 0 };
    if (nfds) {
        struct cmsghdr *c = (struct cmsghdr *)control;
        c->len = sizeof *c + (unsigned long)nfds * 4, c->level = 1, c->type = 1;
        int *p = (int *)(c + 1);
        for (int k = 0; k < nfds; k++)
            p[k] = (int)fds[k];
        m.controllen = (c->len + 7) & ~7UL;
    }
    long r = sys6(NR_SENDMSG, spare.sock, (long)&m, MSG_NOSIGNAL | MSG_DONTWAIT, 0, 0, 0);
    if (r != (long)(32 + h[7])) {
        /* Gone, or it cannot take it: never half-handed. SIGKILL (it is our child, not
         * yet reaped, so the pid is its own), then the fork path. */
        sys6(NR_KILL, spare.pid, SIGKILL, 0, 0, 0, 0);
        spare_drop();
        return 0;
    }
    sys6(NR_CLOSE, spare.sock, 0, 0, 0, 0, 0);
    cmds[slot] = (struct cmd){ h[2], spare.pid, 0, (int)spare.rep, 0, 0, { 0 } };
    spare.pid = 0;
    return 1;
}

#endif
