"""The sandbox's last step before the command; runs inside it as the leased uid.

WHY: the command has no use for new namespaces, mounts, ptrace, keyrings, bpf,
perf or io_uring, and each widens the kernel surface it can reach (a nested user
namespace, for one, gives it capabilities again inside). A seccomp filter built and
loaded by libseccomp's own Python bindings (Debian `python3-seccomp`, used by the
system's /usr/bin/python3, the only Python the sandbox shows) denies them with
EPERM; `clone3` gets ENOSYS (its flags cannot be inspected, and the C library then
falls back to `clone`, whose namespace flags are denied). Syscalls of other ABIs
(i386, x32) kill the process (libseccomp's default for a foreign architecture).

This file is passed as source to `/usr/bin/python3 -I -c` by `sandbox.py`. Steps:
read the command from standard input (the launchers' argument lists stay small;
`sandbox.command_bytes` keeps the command below the kernel's 128 KiB limit for
the one argument of `sh -c`), point standard input at /dev/null, join this
call's cgroups through the descriptors the harness opened (so the command and its
children are counted, not the sandbox's own init), load the filter, set the
per-process limits (address space, processes of the uid, CPU seconds, file size, open
files, no core dumps), say ready on stderr, merge stderr into stdout, exec
`/bin/sh -c command` with a clean environment. (Limits and environment are set here,
in the one Python process the sandbox needs anyway, rather than by prlimit and env:
each exec in the launcher costs a few ms, and the launcher runs once per command.)
"""

import errno
import os
import resource
import sys

READY = b"memspace-sandbox: ready\n"

DENIED = (
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    # looking into or driving other processes, kernel programs and counters, keyrings
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "perf_event_open", "bpf", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
    # administration (refused to an unprivileged uid anyway; denied here too)
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "open_by_handle_at", "name_to_handle_at",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "fanotify_init",
    "lookup_dcookie", "vhangup", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
)
# clone(2) flags that create namespaces (linux/sched.h)
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}


def build_filter():
    import seccomp  # Debian python3-seccomp (libseccomp's bindings)

    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED:
        f.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for flag in CLONE_NEW.values():
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return f


def main(argv):
    procs_fds = [int(x) for x in argv[1].split(",") if x]
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    command = b"".join(chunks)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd in procs_fds:
        os.write(fd, b"0")
        os.close(fd)
    build_filter().load()
    memory, nproc, cpu_s, file_bytes, nofile = (int(x) for x in argv[2:7])
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, file_bytes), (resource.RLIMIT_NOFILE, nofile),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    os.write(2, READY)
    os.dup2(1, 2)
    os.execve("/bin/sh", ["/bin/sh", "-c", command],
              {"PATH": "/usr/bin:/bin", "HOME": "/memory", "TMPDIR": "/tmp", "LANG": "C.UTF-8"})


if __name__ == "__main__":
    try:
        main(sys.argv)
    except BaseException as exc:  # noqa: BLE001 - any failure here is a setup failure the harness reports
        os.write(2, f"memspace-sandbox: setup failed: {type(exc).__name__}: {exc}\n".encode())
        os._exit(125)
