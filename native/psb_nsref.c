/* pysandbox native executor: the launcher's reference to a sandbox's mount namespace,
 * and the closer thread that drops it off the caller's path.
 *
 * Why: a process's exit releases its namespaces in do_exit (exit_task_namespaces)
 * before its parent is notified. When the sandbox's last process exits, the last
 * put of its mount namespace unmounts the whole tree there (umount_tree, then an RCU
 * grace period in namespace_unlock): about 0.1 ms on a default policy, all of it
 * inside the caller's waitpid. The launcher takes a reference (an nsfs descriptor,
 * close-on-exec) right after the clone, so the sandbox's exit no longer is the last
 * put; once the exit status was returned, psb_close_later hands the descriptor to one
 * background thread whose close() pays for the teardown. The other namespaces'
 * teardown is already asynchronous (net, ipc, user: work queues) or cheap (pid, uts):
 * measured in benchmarks/README.md, not worth holding.
 *
 * The descriptor is the launcher's own (never passed on: close-on-exec, and the setup
 * child marks every inherited descriptor close-on-exec before any exec); a fork of the
 * caller (no exec) closes the queued ones at once (atfork handler; the running sandboxes'
 * ones: Python's at-fork hook, pysandbox/backends/native/__init__.py). Runs in the
 * caller's process, any privilege, any thread. */
#include "psb_internal.h"
#include <stdio.h>

#ifndef PIDFD_GET_MNT_NAMESPACE
#define PIDFD_GET_MNT_NAMESPACE _IO(0xFF, 3)   /* PIDFS_IOCTL_MAGIC, Linux 6.11 */
#endif

/* Runs in the caller's process: an nsfs descriptor (close-on-exec) of the mount namespace
 * of ``pid``, our child not yet reaped (so the pid names it), or -1: no reference (an
 * older kernel without the pidfd ioctl and no /proc, the child gone already, or no
 * new mount namespace): the teardown then happens in the sandbox's exit, as without. */
int psb_mntns_ref(const struct psb_plan *plan, pid_t pid)
{
    if (!(plan->clone_flags & CLONE_NEWNS) || pid <= 0)
        return -1;
    int pfd = (int)syscall(__NR_pidfd_open, pid, 0);
    int fd = -1;
    if (pfd >= 0) {
        fd = ioctl(pfd, PIDFD_GET_MNT_NAMESPACE, 0);   /* nsfs: opened close-on-exec */
        int saved = errno;
        close(pfd);
        if (fd < 0 && saved != ENOTTY && saved != EINVAL)
            return -1;   /* ESRCH (gone), EACCES: no reference */
    }
    if (fd < 0) {   /* before 6.11 */
        char path[40];
        snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd >= 0 && !(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
        close(fd);   /* never inheritable: no reference rather than one */
        fd = -1;
    }
    return fd;
}

#define PSB_CLOSER_MAX 256

static pthread_mutex_t psb_closer_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t psb_closer_cv = PTHREAD_COND_INITIALIZER;     /* work queued */
static pthread_cond_t psb_closer_idle = PTHREAD_COND_INITIALIZER;   /* queue empty, none in flight */
static int psb_closer_q[PSB_CLOSER_MAX];
static int psb_closer_n, psb_closer_busy, psb_closer_started, psb_closer_atfork;

/* Runs on the closer thread (every signal blocked) for the life of the process. */
static void *psb_closer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&psb_closer_mu);
    for (;;) {
        while (psb_closer_n == 0) {
            psb_closer_busy = 0;
            pthread_cond_broadcast(&psb_closer_idle);
            pthread_cond_wait(&psb_closer_cv, &psb_closer_mu);
        }
        int fd = psb_closer_q[--psb_closer_n];
        psb_closer_busy = 1;   /* a fork waits until this close is done (atfork prepare) */
        pthread_mutex_unlock(&psb_closer_mu);
        close(fd);
        pthread_mutex_lock(&psb_closer_mu);
    }
    return NULL;
}

/* atfork, in the forking thread: no close in flight across the fork, so the child's
 * copy of the queue names exactly the descriptors still open. */
static void psb_closer_prepare(void)
{
    pthread_mutex_lock(&psb_closer_mu);
    while (psb_closer_busy)
        pthread_cond_wait(&psb_closer_idle, &psb_closer_mu);
}

static void psb_closer_parent(void)
{
    pthread_mutex_unlock(&psb_closer_mu);
}

/* atfork, in the forked child: the closer thread does not exist here; the queued
 * references (copies) are dropped now, never kept by a long-lived fork. The lock and
 * the conditions start afresh (the parent's closer thread is a waiter of one). */
static void psb_closer_child(void)
{
    for (int k = 0; k < psb_closer_n; k++)
        close(psb_closer_q[k]);
    psb_closer_n = psb_closer_busy = psb_closer_started = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
    psb_closer_mu = mu;
    psb_closer_cv = cv;
    psb_closer_idle = idle;
}

/* Called with psb_closer_mu held: the closer thread running, or 0 if it cannot be made. */
static int psb_closer_start(void)
{
    if (!psb_closer_atfork) {
        if (pthread_atfork(psb_closer_prepare, psb_closer_parent, psb_closer_child) != 0)
            return 0;
        psb_closer_atfork = 1;
    }
    if (!psb_closer_started)
        psb_closer_started = psb_thread_start(psb_closer_main, NULL, 64 * 1024) == 0;
    return psb_closer_started;
}

/* Runs in the caller's process, any thread: ``fd`` closed on the closer thread soon
 * (the caller's path does not wait for what its last close tears down); closed here
 * when the thread cannot run or its queue is full. */
void psb_close_later(int fd)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&psb_closer_mu);
    int queued = psb_closer_n < PSB_CLOSER_MAX && psb_closer_start();
    if (queued) {
        psb_closer_q[psb_closer_n++] = fd;
        psb_closer_busy = 1;
    }
    pthread_mutex_unlock(&psb_closer_mu);
    if (queued)
        pthread_cond_signal(&psb_closer_cv);   /* after the unlock: the thread does not wake into a held lock */
    else
        close(fd);
}

/* Runs in the caller's process, any thread: blocks until every descriptor handed to
 * psb_close_later so far is closed (tests, benchmarks). Returns how many were queued. */
int psb_close_drain(void)
{
    pthread_mutex_lock(&psb_closer_mu);
    int n = psb_closer_n;
    while (psb_closer_started && psb_closer_busy)
        pthread_cond_wait(&psb_closer_idle, &psb_closer_mu);
    pthread_mutex_unlock(&psb_closer_mu);
    return n;
}
