/* floor: the least a sandbox launch can cost on this kernel, as a yardstick.
 *
 * It makes only the syscalls every pysandbox default-policy launch needs:
 * clone into new user, mount, pid, ipc, uts (and net) namespaces; id maps;
 * a recursive read-only bind of /; proc; a minimal /dev; a tmpfs /tmp;
 * optional extra read-only binds; pivot_root; loopback up; exec. No init
 * process, no die-with-parent, no capability drop, no error pipe: those are
 * what pysandbox adds on top, and the benchmark reports native/floor.
 *
 * Usage: floor [-n] [-b PATH]... -- CMD [ARG]...
 *   -n       keep the host network (no network namespace, no loopback setup)
 *   -b PATH  bind PATH read-only onto the same path in the sandbox (repeatable)
 * Exit status: the command's own; 128+N if killed by signal N; 125 when a
 * setup step failed (one line on stderr names it).
 *
 * Built by benchmarks/contenders.py with cc into a gitignored path. A CLI, so
 * it may print and exit. Linux >= 5.12 (open_tree, move_mount, mount_setattr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROOT "/tmp"   /* where the new root is assembled (in the private mount ns) */

static void die(const char *step, const char *path)
{
    fprintf(stderr, "floor: %s %s: %s\n", step, path ? path : "", strerror(errno));
    _exit(125);
}

static void write_file(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, data, strlen(data)) < 0)
        die("write", path);
    close(fd);
}

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{ return (int)syscall(SYS_open_tree, dfd, path, flags); }

static int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags)
{ return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags); }

static int sys_mount_setattr(int dfd, const char *path, unsigned flags, struct mount_attr *attr)
{ return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof *attr); }

/* Runs in the child, root of its new user namespace. */
static void ro_recursive(const char *path)
{
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (sys_mount_setattr(AT_FDCWD, path, AT_RECURSIVE, &attr) < 0)
        die("mount_setattr ro", path);
}

static void minimal_dev(void)
{
    static const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
    static const char *links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
                                     {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
                                     {"pts/ptmx", "ptmx"}};
    char dst[64], src[32];
    if (mount("tmpfs", ROOT "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") < 0)
        die("mount tmpfs", ROOT "/dev");
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
        snprintf(dst, sizeof dst, ROOT "/dev/%s", nodes[i]);
        snprintf(src, sizeof src, "/dev/%s", nodes[i]);
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            die("create", dst);
        close(fd);
        if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
            die("bind", dst);
    }
    for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
        snprintf(dst, sizeof dst, ROOT "/dev/%s", links[i][1]);
        if (symlink(links[i][0], dst) < 0)
            die("symlink", dst);
    }
    if (mkdir(ROOT "/dev/shm", 01777) < 0 || mkdir(ROOT "/dev/pts", 0755) < 0)
        die("mkdir", ROOT "/dev/{shm,pts}");
    if (mount("devpts", ROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") < 0)
        die("mount devpts", ROOT "/dev/pts");
}

static void loopback_up(void)
{
    struct ifreq ifr = {0};
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        die("socket", NULL);
    strcpy(ifr.ifr_name, "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        die("loopback up", "lo");
    close(s);
}

static void child(int net, char **binds, int nbinds, char **cmd, uid_t uid, gid_t gid)
{
    char map[64], dst[4096];
    snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
    write_file("/proc/self/uid_map", map);
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
    write_file("/proc/self/gid_map", map);

    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        die("make slave", "/");
    /* A detached recursive copy of /, made read-only in one call, then attached at ROOT. */
    int tree = sys_open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
        die("open_tree", "/");
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (sys_mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr) < 0)
        die("mount_setattr ro", "/");
    if (sys_move_mount(tree, "", AT_FDCWD, ROOT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        die("move_mount", ROOT);
    close(tree);

    if (mount("proc", ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        die("mount proc", ROOT "/proc");
    minimal_dev();
    if (mount("tmpfs", ROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
        die("mount tmpfs", ROOT "/tmp");
    for (int i = 0; i < nbinds; i++) {
        snprintf(dst, sizeof dst, ROOT "%s", binds[i]);
        if (mount(binds[i], dst, NULL, MS_BIND | MS_REC, NULL) < 0)
            die("bind", dst);
        ro_recursive(dst);
    }

    if (chdir(ROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        die("pivot_root", ROOT);
    if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
        die("detach old root", "/");
    if (net)
        loopback_up();
    execvp(cmd[0], cmd);
    fprintf(stderr, "floor: exec %s: %s\n", cmd[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

int main(int argc, char **argv)
{
    int net = 1, nbinds = 0, opt;
    char **binds = calloc((size_t)argc, sizeof *binds);
    while ((opt = getopt(argc, argv, "+nb:")) != -1) {
        if (opt == 'n')
            net = 0;
        else if (opt == 'b' && optarg[0] == '/')
            binds[nbinds++] = optarg;
        else {
            fprintf(stderr, "usage: floor [-n] [-b /PATH]... -- CMD [ARG]...\n");
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "usage: floor [-n] [-b /PATH]... -- CMD [ARG]...\n");
        return 2;
    }
    uid_t uid = geteuid();
    gid_t gid = getegid();
    unsigned long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
    if (net)
        flags |= CLONE_NEWNET;
    /* fork-like clone: NULL stack, the child continues here on a copy of ours. */
    pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
    if (pid < 0)
        die("clone", NULL);
    if (pid == 0)
        child(net, binds, nbinds, argv + optind, uid, gid);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            die("waitpid", NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
