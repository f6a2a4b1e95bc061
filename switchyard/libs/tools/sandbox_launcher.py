"""Starts untrusted Python inside the sandbox. Run as a script: `python -I -S sandbox_launcher.py CONFIG`.

It is its own process (not a preexec_fn) because namespace and mount setup is unsafe to do in a
forked copy of a multi-threaded server. Stdlib only, so it starts fast with `-S`.

Isolated mode (needs root / CAP_SYS_ADMIN): new network namespace (no interfaces but a down
loopback: no network), new PID namespace (when its init dies the kernel kills every process in
it, so fork bombs cannot outlive the run), private mounts (fresh size-limited tmpfs on /tmp and
/dev/shm as the only writable places; non-system top-level directories such as /root, /home and
the repository hidden), then a switch to a throwaway uid so the process limit counts only this
run and nothing root-owned is writable. rlimits cap CPU, memory, processes, file size and open files.
Plain mode: rlimits only, in the host's namespaces; used only when explicitly allowed.

With `argv` in the config it runs that command instead of the snippet (an MCP server over stdio): its
stdin is this launcher's, and its stdout reaches the host through this launcher, which stops the run
once `stdout_cap` bytes have passed, so a server cannot flood the host's memory.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            src.encode() if src else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


# Top-level directories the interpreter and libc need; every other one (/root, /home, /work, /var,
# /opt, /mnt, ...) is covered by an empty tmpfs so user code can neither read nor write it.
SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys", "tmp"})


def _first_closed_ancestor(path: str) -> str | None:
    """The highest directory on `path` that other users cannot traverse (e.g. /root), if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return d
    return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _hide_and_expose(expose: list[str]) -> None:
    # Hide the host's non-system directories, and any directory the sandbox uid cannot enter on the
    # way to the interpreter (pyenv under /root). Then bind-mount just the interpreter trees back,
    # read-only, at their own paths so absolute paths (RPATH, pyvenv.cfg) keep working.
    fds = {p: os.open(p, os.O_PATH) for p in expose}  # before anything is hidden
    hide = {
        "/" + name
        for name in os.listdir("/")
        if name not in SYSTEM_DIRS and os.path.isdir("/" + name) and not os.path.islink("/" + name)
    }
    hide.update(a for a in map(_first_closed_ancestor, expose) if a)
    hidden: list[str] = []
    for d in sorted(hide, key=lambda d: d.count("/")):
        if any(_under(d, h) for h in hidden):
            continue  # already gone under an outer tmpfs
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        hidden.append(d)
    for p, fd in fds.items():
        if any(_under(p, h) for h in hidden):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(p, exist_ok=True)
            else:  # a file (a server's script): the mount point is an empty file of its name
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "a").close()
            _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
            _mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)


def _limits(cfg: dict) -> None:
    cpu = int(cfg["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (cfg["mem_bytes"], cfg["mem_bytes"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fsize"], cfg["fsize"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return (extra or {}) | {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def _exec(cfg: dict, cwd: str) -> None:
    os.chdir(cwd)
    argv = cfg.get("argv")
    if argv:
        os.execvpe(argv[0], argv, _env(cwd, cfg.get("env")))
    py = cfg["python"]
    os.execve(py, [py, "-I", "-B", "main.py"], _env(cwd))


def _stdout_pipe(cfg: dict) -> tuple[int, int] | None:
    """A pipe the run writes its stdout into and this launcher forwards, when the config caps it."""
    return os.pipe() if cfg.get("stdout_cap") else None


def _into_pipe(pipe: tuple[int, int] | None) -> None:
    """In the forked child: its stdout becomes the pipe's write end."""
    if pipe is not None:
        os.dup2(pipe[1], 1)
        os.close(pipe[0])
        os.close(pipe[1])


def _forward(pipe: tuple[int, int] | None, pid: int, cap: int) -> None:
    """Copy the run's stdout to ours until it ends, killing `pid` once more than `cap` bytes came."""
    if pipe is None:
        return
    os.close(pipe[1])
    sent = 0
    while chunk := os.read(pipe[0], 65536):
        if sent + len(chunk) > cap:
            sys.stderr.write(f"sandbox: output exceeded {cap} bytes; stopped\n")
            os.kill(pid, signal.SIGKILL)
            break
        sent += len(chunk)
        os.write(1, chunk)
    os.close(pipe[0])


def run_isolated(cfg: dict) -> int:
    source = ""
    if not cfg.get("argv"):
        with open(os.path.join(cfg["workdir"], "main.py"), encoding="utf-8") as f:
            source = f.read()
    _check(
        _libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS),
        "unshare",
    )
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host
    _hide_and_expose(cfg["expose"])
    tmpfs_opts = f"mode=1777,size={cfg['tmpfs_mb']}m"
    for d in ("/tmp", "/dev/shm"):
        if os.path.isdir(d):
            _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts)
    uid = int(cfg["uid"])
    work = "/tmp/work"
    os.mkdir(work, 0o700)
    os.chown(work, uid, uid)
    if not cfg.get("argv"):
        with open(os.path.join(work, "main.py"), "w", encoding="utf-8") as f:
            f.write(source)
        os.chown(os.path.join(work, "main.py"), uid, uid)

    pipe = _stdout_pipe(cfg)
    pid = os.fork()
    if pid == 0:  # init of the new PID namespace
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _into_pipe(pipe)
        code = 125
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # hide host processes
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            # After setuid (which clears it): if this launcher is killed, init dies, and with it
            # everything in the namespace.
            _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
            # User code must not be the namespace's init: the kernel drops signals init has no
            # handler for, which would make it immune to SIGXCPU. So init only waits.
            child = os.fork()
            if child == 0:
                try:
                    _limits(cfg)
                    _exec(cfg, work)
                except BaseException as e:
                    sys.stderr.write(f"sandbox setup failed: {e}\n")
                os._exit(125)
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
        except BaseException as e:
            sys.stderr.write(f"sandbox setup failed: {e}\n")
        # Exiting init kills whatever the program left running in the namespace.
        os._exit(code)
    # The host stops a run with SIGTERM to this launcher: kill init (and so the whole namespace),
    # then reap it here. A SIGKILLed launcher would orphan init as a zombie the host may never reap.
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    _forward(pipe, pid, int(cfg.get("stdout_cap") or 0))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status)


def run_plain(cfg: dict) -> int:
    pipe = _stdout_pipe(cfg)
    if pipe is not None:
        pid = os.fork()
        if pid != 0:
            signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
            _forward(pipe, pid, int(cfg["stdout_cap"]))
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        _into_pipe(pipe)
    if os.geteuid() == 0 and not any(_first_closed_ancestor(p) for p in cfg["expose"]):
        # Without namespaces, at least do not run user code as root (RLIMIT_NPROC does not bind root);
        # possible only when the interpreter is reachable by other users.
        uid = int(cfg["uid"])
        os.chown(cfg["workdir"], uid, uid)
        if not cfg.get("argv"):
            os.chown(os.path.join(cfg["workdir"], "main.py"), uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _limits(cfg)
    _exec(cfg, cfg["workdir"])
    return 125


def main() -> None:
    cfg = json.loads(sys.argv[1])
    try:
        code = run_isolated(cfg) if cfg["mode"] == "isolated" else run_plain(cfg)
    except OSError as e:
        sys.stderr.write(f"sandbox setup failed: {e}\n")
        code = 125
    # Negative = killed by a signal; report it shell-style so the caller can tell limits apart.
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
