"""The trusted start of every sandboxed interpreter: the code that runs before the user's.

:data:`BOOTSTRAP` is passed as ``python -I -S -c BOOTSTRAP CONFIG``. Inside the
OS boundary, already in the run's filesystem view, it

1. sets ``PR_SET_NO_NEW_PRIVS`` (no setuid binary or file capability can give
   privileges back), joins a fresh, empty session keyring and installs a seccomp
   filter that refuses the keyring syscalls (``add_key``, ``request_key``,
   ``keyctl``) and every syscall of a foreign ABI (x32, i386): keyrings are kernel
   state that no namespace separates, so without it the run could read the
   caller's session keys or plant one for it. Where the filter cannot be installed
   (no ``ctypes``, an architecture other than x86_64 and aarch64), an OS-bounded run
   fails its setup rather than run without it,
2. sets the ``resource`` limits,
3. drops to the run's own unprivileged uid and gid, and checks that root cannot
   be regained,
4. writes one byte to the ready pipe -- the parent treats a run that never got
   here as a sandbox that could not be set up, not as the code's failure,
5. installs the audit hook (:pep:`578`), the second layer: it refuses process
   creation, sockets, signals, ``ctypes`` and writes outside the work directory,
   and turns them into a clear ``blocked: ...`` reason. It lives in the same
   interpreter as the untrusted code and can be switched off by it; nothing
   depends on it for safety.
"""

from __future__ import annotations

__all__ = ["BLOCK_EVENTS", "BLOCK_IMPORTS", "BOOTSTRAP", "KEYRING_FILTER"]

BOOTSTRAP = r"""
import json, os, resource, sys
_cfg = json.loads(sys.argv[1])
def _kernel_state():
    import ctypes, platform, struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    arch = _cfg["seccomp"].get(platform.machine())
    if arch is None:
        return "no keyring filter for this architecture (%s)" % platform.machine()
    libc.syscall.restype = ctypes.c_long
    libc.syscall(arch[1][-1], 1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a fresh, empty one
    deny = 0x50000 | 1  # SECCOMP_RET_ERRNO | EPERM
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch[0]), (0x06, 0, 0, deny), (0x20, 0, 0, 0)]
    if arch[2]:  # x86_64: the x32 ABI's numbers have this bit; none is allowed
        prog.append((0x35, len(arch[1]) + 1, 0, 0x40000000))
    for i, nr in enumerate(arch[1]):
        prog.append((0x15, len(arch[1]) - i, 0, nr))
    prog += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, deny)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in prog))
    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = _Prog(len(prog), ctypes.cast(code, ctypes.c_void_p))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        return "the keyring filter was refused: " + os.strerror(ctypes.get_errno())
    return ""
try:
    _why = _kernel_state()
except (ImportError, OSError, AttributeError) as _exc:
    _why = "no keyring filter: %r" % (_exc,)
if _why and _cfg["need_unprivileged"]:
    raise SystemExit("[sandbox] setup: " + _why)
_m = None
for _m in [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes")]:
    del sys.modules[_m]  # so that `import ctypes` in the user code is an audited import
def _lim(kind, soft, hard=None):
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
_lim(resource.RLIMIT_CPU, _cfg["cpu"], _cfg["cpu"] + 1)
_lim(resource.RLIMIT_AS, _cfg["mem"])
_lim(resource.RLIMIT_FSIZE, _cfg["fsize"])
_lim(resource.RLIMIT_NOFILE, _cfg["nofile"])
_lim(resource.RLIMIT_CORE, 0)
_lim(resource.RLIMIT_NPROC, _cfg["nproc"])
if _cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(_cfg["gid"])
    os.setuid(_cfg["uid"])
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise SystemExit("[sandbox] setup: root could be regained after the uid drop")
if _cfg["need_unprivileged"] and (os.getuid() == 0 or os.geteuid() == 0):
    raise SystemExit("[sandbox] setup: still root after the uid drop")
_work = _cfg["work"]
os.chdir(_work)
os.write(_cfg["ready_fd"], b"1")
os.close(_cfg["ready_fd"])
with open(_cfg["program"], "rb") as _f:
    _code = compile(_f.read(), _cfg["program"], "exec")
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_IMPORTS = frozenset(_cfg["block_imports"])
_EVENTS = frozenset(_cfg["block_events"])
_PATHS = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1,
          "os.rename": 2, "os.truncate": 1, "os.utime": 1, "shutil.rmtree": 1,
          "os.chflags": 1, "os.setxattr": 1, "os.removexattr": 1}
_abspath, _fspath, _sep = os.path.abspath, os.fspath, os.sep
def _inside(p):
    if isinstance(p, int):
        return True
    try:
        p = _fspath(p)
    except TypeError:
        return False
    if isinstance(p, bytes):
        p = p.decode("utf-8", "surrogateescape")
    p = _abspath(p)
    return p == _work or p.startswith(_work + _sep)
def _deny(what):
    raise PermissionError("[sandbox] blocked: " + what)
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE)
        if writing and not _inside(path):
            _deny("writing outside the sandbox directory: %r" % (path,))
    elif event == "import":
        if args[0] and args[0].split(".")[0] in _IMPORTS:
            _deny("import " + args[0])
    elif event in _EVENTS or event.startswith("socket."):
        _deny(event)
    elif event in _PATHS:
        for p in args[: _PATHS[event]]:
            if not _inside(p):
                _deny(event + " outside the sandbox directory: %r" % (p,))
sys.argv = [_cfg["program"]]
sys.addaudithook(_hook)
del _f, _lim, _m, _kernel_state, _why
exec(_code, {"__name__": "__main__", "__file__": _cfg["program"], "__builtins__": __builtins__})
"""

#: Per machine: the audit architecture, the syscalls the seccomp filter refuses
#: (``add_key``, ``request_key``, ``keyctl``: the kernel keyrings, which no namespace
#: separates) and whether the x32 ABI's numbers must be refused too.
KEYRING_FILTER = {
    "x86_64": (0xC000003E, (248, 249, 250), True),
    "aarch64": (0xC00000B7, (217, 218, 219), False),
}

#: Imports the audit hook refuses (first dotted component).
BLOCK_IMPORTS = (
    "socket",
    "_socket",
    "ssl",
    "_ssl",
    "ctypes",
    "_ctypes",
    "_posixsubprocess",
    "subprocess",
    "multiprocessing",
    "_multiprocessing",
    "asyncio",
    "urllib",
    "http",
    "ftplib",
    "smtplib",
    "pty",
)

#: Audit events the hook refuses (any ``socket.*`` event too).
BLOCK_EVENTS = (
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.startfile",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "resource.setrlimit",
    "resource.prlimit",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "os.symlink",
    "os.link",
    "os.mkfifo",
    "os.mknod",
    "mmap.__new__",
)
