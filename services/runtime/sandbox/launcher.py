"""Layer 2 launcher: rlimits, Landlock and a seccomp filter on itself, then exec bash. Standalone:
run as `python -I -S -c SOURCE UID CWD_FD RO_FDS RW_FDS DEV RO RLIMITS COMMAND` (no imports from the
repository, no site, nothing slow to import: json and platform alone cost ~6 ms a call).

UID: a uid to drop to, or "" (keep); *_FDS: comma-separated fds; DEV, RO: ":"-separated paths;
RLIMITS: "RLIMIT_AS=n,RLIMIT_CPU=n,...". The environment is the command's (already cleared). Directories
reached through an fd are opened by the runtime (the sandbox's user may not be able to walk to them);
the fds are closed before the exec.
Exit 126 with a `sandbox:` line on stderr when the kernel refuses a step: nothing runs unconfined.
"""

import ctypes
import os
import resource
import struct
import sys

LANDLOCK_CREATE, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT = 444, 445, 446  # same numbers on x86_64 and aarch64
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
FS_READ = 1 | 4 | 8  # EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # rights a rule on a non-directory may carry
NO_DEVICES = ~((1 << 6) | (1 << 11))  # never MAKE_CHAR / MAKE_BLOCK
FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}  # ABI -> number of filesystem rights it handles

# syscall numbers: (x86_64, aarch64)
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
NR = {
    "socket": (41, 198), "clone": (56, 220), "clone3": (435, 435),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "setsid": (112, 157), "setpgid": (109, 154), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "kexec_load": (246, 104), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "acct": (163, 89), "swapon": (167, 224),
    "reboot": (169, 142), "open_by_handle_at": (304, 265),
}
DENIED = [n for n in NR if n not in ("socket", "clone", "clone3")]
CLONE_NS = 0x7E020000 | 0x80  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET,TIME}
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
ALLOW, KILL = 0x7FFF0000, 0x80000000


def fail(msg):
    sys.stderr.write(f"sandbox: {msg}\n")
    os._exit(126)


def errno_ret(e):
    return 0x00050000 | e


def bpf(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp_program(arch, namespaced=False):
    """namespaced=True: the filter bwrap installs (--seccomp) in its own namespaces, where sockets are
    harmless (no network) and setsid/setpgid are allowed (the pid namespace is killed as a whole)."""
    idx = 0 if arch == "x86_64" else 1
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [bpf(ld, 0, 0, 4), bpf(jeq, 1, 0, ARCHES[arch]), bpf(ret, 0, 0, KILL), bpf(ld, 0, 0, 0)]
    if arch == "x86_64":  # the x32 ABI would bypass the numbers below
        prog += [bpf(jge, 0, 1, 0x40000000), bpf(ret, 0, 0, errno_ret(ENOSYS))]
    if not namespaced:
        prog += [bpf(jeq, 0, 4, NR["socket"][idx]), bpf(ld, 0, 0, 16), bpf(jeq, 0, 1, 1),  # AF_UNIX only
                 bpf(ret, 0, 0, ALLOW), bpf(ret, 0, 0, errno_ret(EAFNOSUPPORT))]
    prog += [bpf(jeq, 0, 4, NR["clone"][idx]), bpf(ld, 0, 0, 16), bpf(jset, 0, 1, CLONE_NS),
             bpf(ret, 0, 0, errno_ret(EPERM)), bpf(ret, 0, 0, ALLOW)]
    prog += [bpf(jeq, 0, 1, NR["clone3"][idx]), bpf(ret, 0, 0, errno_ret(ENOSYS))]  # libc falls back to clone
    for name in DENIED:
        if namespaced and name in ("setsid", "setpgid"):
            continue
        prog += [bpf(jeq, 0, 1, NR[name][idx]), bpf(ret, 0, 0, errno_ret(EPERM))]
    prog.append(bpf(ret, 0, 0, ALLOW))
    return b"".join(prog)


def landlock(libc, cfg):
    sysc = libc.syscall
    sysc.restype = ctypes.c_long
    abi = sysc(LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        fail(f"Landlock unavailable (errno {ctypes.get_errno()})")
    fs_all = ((1 << FS_BITS.get(abi, 16)) - 1) & NO_DEVICES
    handled = (1 << FS_BITS.get(abi, 16)) - 1
    attr = struct.pack("Q", handled)
    if abi >= 4:
        attr += struct.pack("Q", 1 | 2)  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP, with no rule allowing any
    if abi >= 6:
        attr += struct.pack("Q", 1 | 2)  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | SIGNAL
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = sysc(LANDLOCK_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        fail(f"landlock_create_ruleset failed (errno {ctypes.get_errno()})")

    def allow(fd, rights):
        if not _isdir(fd):
            rights &= FILE_ONLY
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & fs_all, fd), 12)
        if sysc(LANDLOCK_ADD_RULE, ruleset, 1, rule, 0) < 0:
            fail(f"landlock_add_rule failed (errno {ctypes.get_errno()})")

    for path in cfg["ro"]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        allow(fd, FS_READ)
        os.close(fd)
    for path in cfg["dev"]:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        allow(fd, 2 | 4 | (1 << 14))
        os.close(fd)
    for fd in cfg["ro_fds"]:
        allow(fd, FS_READ)
    for fd in cfg["rw_fds"]:
        allow(fd, fs_all)
    if sysc(LANDLOCK_RESTRICT, ruleset, 0) < 0:
        fail(f"landlock_restrict_self failed (errno {ctypes.get_errno()})")
    os.close(ruleset)


def _isdir(fd):
    try:
        return (os.fstat(fd).st_mode & 0o170000) == 0o040000
    except OSError:
        return False


def config(argv):
    uid, cwd_fd, ro_fds, rw_fds, dev, ro, limits, command = argv
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    paths = lambda text: [x for x in text.split(":") if x]  # noqa: E731
    return {"uid": int(uid) if uid else None, "cwd_fd": int(cwd_fd), "ro_fds": ints(ro_fds), "rw_fds": ints(rw_fds),
            "dev": paths(dev), "ro": paths(ro), "command": command,
            "rlimits": {k: int(v) for k, _, v in (item.partition("=") for item in limits.split(",") if item)}}


def main():
    cfg = config(sys.argv[1:])
    command = cfg["command"]
    arch = os.uname().machine
    if arch not in ARCHES:
        fail(f"no seccomp filter for {arch}")
    uid = cfg.get("uid")
    if uid is not None:  # a root runtime: drop to the session's uid here (cheaper than a full fork in the runtime)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.fchdir(cfg["cwd_fd"])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("PR_SET_NO_NEW_PRIVS failed")
    landlock(libc, cfg)
    code = seccomp_program(arch)
    filt = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("HxxxxxxQ", len(code) // 8, ctypes.addressof(filt))
    pbuf = ctypes.create_string_buffer(prog, len(prog))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, pbuf, 0, 0) != 0:
        fail(f"seccomp filter refused (errno {ctypes.get_errno()})")
    for fd in {cfg["cwd_fd"], *cfg["ro_fds"], *cfg["rw_fds"]}:
        os.close(fd)
    os.execv("/bin/bash", ["bash", "-c", command])


if __name__ == "__main__":  # run with -c; the runtime imports seccomp_program for bwrap
    main()
