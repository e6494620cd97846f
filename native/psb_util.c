/* pysandbox native executor: Small utilities of the executor: the child's failure/record channel (psb_fail,
 * psb_record), whole writes, path copies, the id-map number format, bringing "lo"
 * up. Each says which process runs it; most run in the cloned child, where only
 * async-signal-safe calls are allowed. */
#include "psb_internal.h"

/* Runs in the child: a record that is not a failure (PSB_OP_HOP). */
int psb_record(struct psb_child *c, int stage, int op)
{
    struct psb_record rec = { stage, op, 0 };
    ssize_t w;
    do {
        w = write(c->errfd, &rec, sizeof rec);
    } while (w < 0 && errno == EINTR);
    return w == (ssize_t)sizeof rec ? 0 : -1;
}

/* Runs in the child, any privilege: report and die. */
void psb_fail(struct psb_child *c, int stage, int op, int err)
{
    struct psb_record rec = { stage, op, err };
    ssize_t r;
    /* Flag first: once the record is out the parent may unmap the memory we share;
     * after the write nothing but _exit touches it. */
    if (c->failed != NULL)
        *c->failed = 1;
    do {
        r = write(c->errfd, &rec, sizeof rec);
    } while (r < 0 && errno == EINTR);
    _exit(127);
}

/* Runs in the child, any privilege. */
int psb_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t r = write(fd, buf, len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Runs in the child, any privilege: write a short text to a file (id maps, sysctls). */
int psb_write_file_at(int dirfd, const char *path, const char *text)
{
    int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = psb_write_all(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

/* Runs in the child: copy an absolute path into a PATH_MAX stack buffer; its length,
 * or 0 with errno ENAMETOOLONG when it does not fit. */
size_t psb_path_copy(char buf[PATH_MAX], const char *path)
{
    size_t len = strlen(path);
    if (len >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return 0;
    }
    memcpy(buf, path, len + 1);
    return len;
}

/* Runs in the child, any privilege: copy what a descriptor yields, to EOF. */
int psb_copy_fd(int from, int to)
{
    char buf[4096];
    for (;;) {
        ssize_t r = read(from, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 0;
        if (psb_write_all(to, buf, (size_t)r) != 0)
            return -1;
    }
}

/* Runs in the child with CAP_NET_ADMIN in the new network namespace. */
int psb_loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    int r = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (r == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int saved = errno;
    close(s);
    errno = saved;
    return r;
}

/* Any process, no malloc: one byte ``tag`` with ``n`` (1 or 2) descriptors (SCM_RIGHTS)
 * over unix socket ``sock``. Returns 0, or -1 with errno set. */
int psb_send_fds(int sock, char tag, const int *fds, int n)
{
    struct iovec iov = { &tag, 1 };
    union { struct cmsghdr h; char buf[CMSG_SPACE(2 * sizeof(int))]; } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent == 1)
        return 0;
    if (sent >= 0)
        errno = EPIPE;
    return -1;
}

/* Runs in the setup process inside the sandbox's new network namespace, after "lo"
 * is up, before the command exists (network proxy mode): the proxy's listener is made
 * here, so it is listening before the command can run and no process of the sandbox
 * serves it. 127.0.0.1:port always; [::1]:port (IPV6_V6ONLY) unless this namespace has
 * no IPv6 (EAFNOSUPPORT, EADDRNOTAVAIL: ipv6.disable). The listener(s) leave over
 * ``sock`` in one SCM_RIGHTS message (the launcher's end serves them on the host) and
 * are closed here with ``sock``: nothing of them reaches the command. Returns 0, or -1
 * with errno set. */
int psb_listen_send(int sock, int port)
{
    int fds[2] = { -1, -1 }, n = 0, r = -1;
    if (sock < 0 || port <= 0 || port > 65535) {
        errno = sock < 0 ? EBADF : EINVAL;
        return -1;
    }
    struct sockaddr_in a4;
    memset(&a4, 0, sizeof a4);
    a4.sin_family = AF_INET;
    a4.sin_port = htons((uint16_t)port);
    a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[0] < 0 || bind(fds[0], (struct sockaddr *)&a4, sizeof a4) != 0 || listen(fds[0], 4096) != 0)
        goto out;
    n = 1;
    fds[1] = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[1] >= 0) {
        struct sockaddr_in6 a6;
        int one = 1;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)port);
        a6.sin6_addr = in6addr_loopback;
        if (setsockopt(fds[1], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0 ||
            bind(fds[1], (struct sockaddr *)&a6, sizeof a6) != 0) {
            if (errno != EADDRNOTAVAIL)
                goto out;
            close(fds[1]);
            fds[1] = -1;
        } else if (listen(fds[1], 4096) != 0) {
            goto out;
        } else {
            n = 2;
        }
    } else if (errno != EAFNOSUPPORT) {
        goto out;
    }
    if (psb_send_fds(sock, 'L', fds, n) == 0)
        r = 0;
out:;
    int saved = errno;
    for (int k = 0; k < 2; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    close(sock);
    errno = saved;
    return r;
}

/* Any process, no stdio or malloc: "<id> <id> 1\n". */
void psb_fmt_map(char *buf, unsigned int id)
{
    char digits[16];
    int n = 0;
    do {
        digits[n++] = (char)('0' + id % 10);
        id /= 10;
    } while (id);
    char *p = buf;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = n - 1; i >= 0; i--)
            *p++ = digits[i];
        *p++ = ' ';
    }
    memcpy(p, "1\n", 3);
}
