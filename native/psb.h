/* pysandbox native executor: public declarations. build_native.py's cdef mirrors
 * the structs and functions below and generates its enums and flags from this file;
 * the values are read by Python through the cdef's "= ..." so they cannot disagree. */
#ifndef PSB_H
#define PSB_H
#include <sys/syscall.h>
#include "_psb_config.h"   /* generated: PSB_HAS_EXEC_INIT */

/* Feature flags read by Python as has_* attributes. */
#ifdef __NR_mount_setattr
#define PSB_HAS_MOUNT_SETATTR 1
#else
#define PSB_HAS_MOUNT_SETATTR 0
#endif
#define PSB_HAS_CLOSE_RANGE 1

/* The layout version of everything below: bump it with any change to a struct, an
 * enum or a flag. pysandbox/backends/_native_lib.py refuses a module whose stamp
 * differs from its own (a module built from an older psb.h: rebuild it). */
#define PSB_ABI_VERSION 8

/* One op of the flat array the child walks. Strings are offsets into the plan's
 * string table (-1: none); numbers are in n, m, mode. The meaning of each field
 * per kind is documented in psb_ops.c next to the handler and in backends/native/__init__.py. */
enum psb_op_kind {
    PSB_OP_IDMAP = 1,         /* a=setgroups "deny", b=uid_map text, c=gid_map text */
    PSB_OP_PDEATHSIG,         /* prctl(PR_SET_PDEATHSIG, SIGKILL) + lifeline check */
    PSB_OP_SETUP_ROOT,        /* a=base dir: rslave /, tmpfs base, newroot/oldroot, pivot */
    PSB_OP_MKDIRS,            /* b=path, mode (-1: 0755), m=missing parents' mode (-1: 0755) */
    PSB_OP_MKFILE,            /* b=path: create an empty file if nothing is there; m as MKDIRS */
    PSB_OP_BIND,              /* a=src b=dst c=submount list (fallback), flags RO/DEV/OPTIONAL;
                                 m>=0: a is fd m's magic link, bound by the path it names */
    PSB_OP_MOUNT,             /* a=source b=dst c=fstype d=data n=mount flags (tmpfs, proc, devpts,
                                 mqueue, overlay: data built by Python, < a page) */
    PSB_OP_SETATTR,           /* b=dst: flags RO (mount_setattr non-recursive, or remount) */
    PSB_OP_SYMLINK,           /* a=target b=link path */
    PSB_OP_WRITE,             /* b=dst a=data n=len m=fd(-1) d=tmp file (BIND) mode flags */
    PSB_OP_CHMOD,             /* b=path mode */
    PSB_OP_PIVOT,             /* second pivot into newroot, then one detach of the setup tree */
    PSB_OP_LOOPBACK,          /* "lo" up */
    PSB_OP_HOSTNAME,          /* a=name */
    PSB_OP_DISABLE_USERNS,    /* a=uid_map text b=gid_map text (nested user namespace);
                                 n=1: limit to it first (max_user_namespaces=1), n=0: nest only */
    PSB_OP_CAPS,              /* n=keep mask, m=last cap */
    PSB_OP_NNP,               /* PR_SET_NO_NEW_PRIVS */
    PSB_OP_INIT,              /* fork: this process stays as the pid-1 init */
    PSB_OP_SECCOMP,           /* a=program n=length in bytes; m=1: with a notification
                                 listener sent over launch notify_fd (psb_tail.h) */
    PSB_OP_SETSID,
    PSB_OP_CHDIR,             /* a=path */
    PSB_OP_WAIT_FD,           /* n=fd: wait for a byte or EOF on it, then close it (bwrap's
                                 --userns-block-fd and --block-fd); flags LIFELINE */
    PSB_OP_SETNS,             /* n=fd m=nstype: join a given namespace (--userns, --pidns, --userns2) */
    PSB_OP_UNSHARE,           /* n=clone flags: the new namespaces, after joining given ones */
    PSB_OP_HOP,               /* clone(CLONE_PARENT): continue in a child of the launcher, the
                                 first process of the pid namespace set up before. The old
                                 process announces it (PSB_STAGE_HOP) and exits after the
                                 clone; the new one reports itself (PSB_STAGE_HOP_PID) with its
                                 credentials, which the kernel translates into the launcher's
                                 pid namespace (the error channel is then a socket pair) */
    PSB_OP_CHECK_PATH,        /* a=host path under /oldroot: it must resolve without any symlink
                                 (an overlay layer, checked before the kernel resolves it) */
    PSB_OP_LANDLOCK,          /* n=kind (PSB_LANDLOCK_*, native/psb_landlock.h), a=the writable
                                 destinations (NUL-separated, empty-terminated; -1 none); the
                                 command's process only (after INIT): enter a Landlock
                                 domain of its own (native/psb_tail.h); the exec'd init is
                                 then made dumpable, since nothing in the domain can reach it */
    PSB_OP_RLIMIT,            /* the command's process only (after INIT): n=resource m=soft
                                 mode=hard (-1: unlimited), recorded here and set right
                                 before its exec (psb_exec), after every descriptor of the
                                 setup (pty included) is open: a low RLIMIT_NOFILE never
                                 breaks the setup (pysandbox/limits.py) */
    PSB_OP_LISTEN,            /* n=port: network proxy mode (after LOOPBACK): listen on
                                 127.0.0.1:n (and [::1]:n where the namespace has IPv6),
                                 send the listener(s) over the launch's proxy_fd (SCM_RIGHTS)
                                 and close them and proxy_fd (native/psb_tail.h psb_tail_listen) */
    /* After the last mount and any nested user namespace, on both backends (native/psb_tail.h),
     * so both mount tables read the same, order included: */
    PSB_OP_MOUNT_PRIVATE,     /* a mount namespace of our user namespace, the tree MS_REC|MS_PRIVATE */
    PSB_OP_RO_COVER,          /* b=path in the sandbox's root: bind it on itself read-only (nosuid
                                 nodev noexec); absent or already read-only: nothing to do (a
                                 procfs cover) */
    /* The bwrap init's own (native/psb_bwrap_init.c; the native child refuses it, EINVAL): */
    PSB_OP_BIND_CHECK,        /* b=path n=st_dev m=st_ino: fail closed (ELOOP) unless lstat(b) is
                                 that inode (the source the launcher validated) */
};

/* Where a failure happened, besides "op number op_index failed". */
enum psb_stage {
    PSB_STAGE_OP = 1,         /* the op at op_index */
    PSB_STAGE_CLONE,
    PSB_STAGE_PARENT_DIED,
    PSB_STAGE_FDS,
    PSB_STAGE_EXEC,
    PSB_STAGE_PIPE,
    PSB_STAGE_HOP,            /* not a failure: a hop begins (from the old process) */
    PSB_STAGE_HOP_PID,        /* not a failure: the new process; its pid is in the credentials */
    PSB_STAGE_PTY,            /* the sandbox's terminal (launch pty_fd): open, unlock, send */
    PSB_STAGE_MONITOR,        /* the launcher's lifetime monitor (launch monitor): pidfd_open
                                 of the child, the lifeline pipe or the monitor's clone */
};

/* Op flags. */
#define PSB_F_RO        0x01
#define PSB_F_DEV       0x02
#define PSB_F_OPTIONAL  0x04  /* ENOENT (source or destination missing) is not an error */
#define PSB_F_BIND      0x08  /* WRITE: create on the setup tmpfs then bind on dst */
#define PSB_F_MODE      0x10  /* WRITE/MKDIRS: apply mode with chmod */
#define PSB_F_USERNS_FDS 0x20 /* SETUP_ROOT: keep /proc/self and the userns sysctl open */
#define PSB_F_IF_WRITABLE 0x40 /* BIND: only if access(src, W_OK) succeeds (EACCES/ENOENT/EROFS: skip):
                                  bwrap's own covering right after a procfs; every PROC_READONLY
                                  entry is then covered unconditionally at the tail (RO_COVER) */
#define PSB_F_CURRENT_IDS 0x80 /* DISABLE_USERNS: map the current euid/egid onto themselves
                                  (the caller wrote the outer maps: --userns-block-fd) */
#define PSB_F_LIFELINE  0x100 /* WAIT_FD: the launcher's death ends the wait (parent_died) */
#define PSB_F_NO_AMBIENT 0x200 /* CAPS: kept capabilities stay out of the ambient set (after
                                  --userns2 the uid may be unmapped: exec decides, as bwrap) */
#define PSB_F_NOFOLLOW  0x400 /* CHDIR: no symlink in the path (the policy's canonical workdir) */
#define PSB_F_NO_RAISE  0x800 /* CAPS: kept capabilities stay permitted/effective only: nothing
                                  inheritable or ambient (bwrap run by root with no --cap-add/--cap-drop) */

/* Probe kinds for psb_probe. */
#define PSB_PROBE_CLONE     0
#define PSB_PROBE_PROC      1
#define PSB_PROBE_LOOPBACK  2
#define PSB_PROBE_IDMAP     3   /* write setgroups and the caller's identity id maps */

struct psb_op {
    int kind;
    int flags;
    int a, b, c, d;
    long n, m, mode;
};

/* The head of the bwrap init's plan memfd (native/psb_bwrap_init.c): then nops struct
 * psb_op, then strtab_len bytes of string table (pysandbox/backends/bwrap_tail.py packs it). */
#define PSB_PLAN_MAGIC 0x54425350u   /* "PSBT" */
struct psb_tail_hdr {
    unsigned int magic;
    unsigned int abi;         /* PSB_ABI_VERSION */
    int nops;
    int strtab_len;
    int exec_mode;            /* 1: no fork, the command is exec'd in the init's process */
    int gate_fd;              /* as launch monitor, or -1 (psb_tail_gate) */
    int pty_fd;               /* as psb_launch pty_fd, pty_stdio, pty_winsize */
    int pty_stdio;
    unsigned long pty_winsize;
    int proxy_fd;             /* as psb_launch proxy_fd, notify_fd */
    int notify_fd;
};

struct psb_plan {
    const struct psb_op *ops;
    int nops;
    const char *strtab;
    unsigned long clone_flags;
    int no_mount_setattr;     /* force the remount-each-submount fallback */
    int init_fd;              /* sealed memfd of the freestanding init, or -1: fork mode */
    int share_memory;         /* setup child shares the caller's memory (CLONE_VM) until
                                 exec; only with exec-init or without an init */
};

struct psb_launch {
    const char *argbuf;       /* argc NUL-terminated strings back to back */
    int argc;
    const char *envbuf;
    int envc;
    const char *cand;         /* ncand NUL-terminated absolute paths to execve in order
                                 (pysandbox/execpath.py exec_candidates) */
    int ncand;
    int searched;             /* the candidates come from a PATH search: ENOENT-like errors
                                 go on to the next, EACCES counts only for a file */
    unsigned long fwd_signals; /* signals the init forwards to the command (bit N-1: signal N) */
    int stdio[3];
    const int *pass_fds;
    int npass;
    int want_status;          /* open the init's status pipe */
    int started_fd;           /* >= 0: the child's pid (4 bytes) is written here right after
                                 the clone, before setup (a WAIT_FD op may need it outside) */
    const int *close_first;   /* the child closes these before any op (bwrap's info fd:
                                 its reader waits for EOF before releasing a WAIT_FD) */
    int nclose;
    int release_fd;           /* >= 0 (with started_fd): once its pid is reported (the last
                                 hop's, with hops), the setup waits for a byte here before
                                 any op runs in its namespaces, so the reader of started_fd
                                 sees them (bwrap's namespace ids) before the command can
                                 exit; the launcher's death ends the wait (parent_died) */
    int pty_fd;               /* >= 0: a unix socket; right before exec the command's process
                                 opens a pty in the sandbox's devpts (/dev/pts/ptmx), sends the
                                 master over it (SCM_RIGHTS), becomes a session leader with the
                                 slave as controlling terminal, and closes master and socket */
    int pty_stdio;            /* bit i: the slave becomes descriptor i (instead of stdio[i]) */
    unsigned long pty_winsize; /* rows << 16 | cols set on the new pty (0: left as is) */
    int proxy_fd;             /* >= 0: a unix socket for the LISTEN op (else LISTEN fails EBADF) */
    int notify_fd;            /* >= 0: a unix socket for the SECCOMP op with m=1 (its listener
                                 goes there; else that op fails EBADF) */
    int monitor;              /* as_pid_1 (no init of ours): once the child's pid is final the
                                 launcher starts its lifetime monitor (native/psb_monitor.h)
                                 and only then lets the child go on (the gate pipe): the
                                 command never runs without it */
    int monitor_exe;          /* the init's sealed memfd, exec'd in monitor mode, or -1: the
                                 monitor stays a fork of the caller */
    long long *stamps;        /* NULL (no cost), or a shared page (MAP_SHARED: a fork-mode
                                 child writes it too) of PSB_STAMP_MAX (tag, CLOCK_MONOTONIC ns)
                                 pairs after a count: per-step timings (--verbose,
                                 benchmarks/profile_launch.py); tags: an op's index once it
                                 is done, or a PSB_STAMP_* point */
};

/* Timing points of psb_launch stamps besides "op N done" (pysandbox/backends/native_stamps.py). */
#define PSB_STAMP_MAX        240
#define PSB_STAMP_CLONE      (-1)   /* launcher: right before the clone */
#define PSB_STAMP_CLONED     (-2)   /* launcher: the clone returned */
#define PSB_STAMP_ENTRY      (-3)   /* setup process: first instruction of its own */
#define PSB_STAMP_CMD        (-4)   /* command's process: started (after the go pipe) */
#define PSB_STAMP_EXEC       (-5)   /* command's process: right before execve */
#define PSB_STAMP_INIT_EXEC  (-6)   /* setup process: right before exec'ing the init */
#define PSB_STAMP_EOF        (-7)   /* launcher: the error pipe's EOF (the exec happened) */

struct psb_result {
    int pid;
    int status_fd;            /* read end of the init's status pipe, or -1 */
    int monitor_pid;          /* launch monitor: the monitor (our child: reap it), else -1 */
    int monitor_fd;           /* launch monitor: the lifeline's write end (close it when the
                                 sandbox is done, then reap the monitor), else -1 */
    int stage;
    int op;
    int err;
    int mntns_fd;             /* the launcher's reference to the sandbox's mount namespace
                                 (close-on-exec; native/psb_nsref.c): hand it to
                                 psb_close_later once the sandbox was reaped; or -1 */
};

int psb_spawn(const struct psb_plan *plan, const struct psb_launch *launch, struct psb_result *res);
int psb_probe(unsigned long clone_flags, int what);
int psb_mount_setattr_works(void);
int psb_init_memfd(void);
int psb_probe_exec_init(int init_fd);
long psb_landlock_abi(void);
int psb_monitor_start(int pid1_fd, int exe_fd, int *lifeline_fd);
void psb_close_later(int fd);
int psb_close_drain(void);
#endif
