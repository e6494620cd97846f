/* pysandbox native executor: Small utilities of the executor: the child's failure/record channel (psb_fail,
 * psb_record), whole writes, path copies, the id-map number format, bringing "lo"
 * up. Each says which process runs it; most run in the cloned child, where only
 * async-signal-safe calls are allowed. */
#include "psb_internal.h"
#define PSB_LIBC
#include "psb_sys.h"   /* psb_utoa */

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

/* Any process, no stdio or malloc: "<id> <id> 1\n". */
void psb_fmt_map(char *buf, unsigned int id)
{
    char *p = buf;
    for (int rep = 0; rep < 2; rep++) {
        p += psb_utoa(p, id);
        *p++ = ' ';
    }
    memcpy(p, "1\n", 3);
}
