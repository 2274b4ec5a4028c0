#!/usr/bin/env python3
"""Extended attributes through a mount, against the host kernel's tmpfs.

Usage: xattrs.py REFERENCE MOUNT. Runs the same calls in a new directory under each (REFERENCE
on a tmpfs), as root and as an ordinary user, and requires the same answer (value, list or
errno) from both, call by call. Prints how many calls agreed.
"""
import os
import sys
import tempfile


def script(root):
    """Every call's answer, in order."""
    out = []

    def call(what, fn):
        try:
            r = fn()
            out.append(f"{what} -> {r!r}")
        except OSError as e:
            out.append(f"{what} -> {os.strerror(e.errno)}")

    d = tempfile.mkdtemp(prefix="xattrs-", dir=root)
    f, sub, link, fifo = (os.path.join(d, n) for n in ("f", "sub", "link", "fifo"))
    open(f, "w").close()
    os.mkdir(sub)
    os.symlink("f", link)
    os.mkfifo(fifo)
    os.chmod(f, 0o644)
    for name in ["user.b", "user.a", "user.zz", "trusted.t", "security.s"]:
        call(f"set {name}", lambda: os.setxattr(f, name, name.encode()))
    call("list", lambda: os.listxattr(f))
    call("get", lambda: os.getxattr(f, "user.a"))
    call("get missing", lambda: os.getxattr(f, "user.none"))
    call("create existing", lambda: os.setxattr(f, "user.a", b"x", os.XATTR_CREATE))
    call("replace missing", lambda: os.setxattr(f, "user.n", b"x", os.XATTR_REPLACE))
    call("big", lambda: os.setxattr(f, "user.big", b"7" * 65536))
    call("get big", lambda: len(os.getxattr(f, "user.big")))
    call("too big", lambda: os.setxattr(f, "user.big", b"7" * 65537))
    call("long name", lambda: os.setxattr(f, "user." + "a" * 251, b"x"))
    call("bare prefix", lambda: os.setxattr(f, "user.", b"x"))
    call("no namespace", lambda: os.setxattr(f, "foo.bar", b"x"))
    call("remove", lambda: os.removexattr(f, "user.b"))
    call("remove again", lambda: os.removexattr(f, "user.b"))
    call("dir", lambda: os.setxattr(sub, "user.d", b"1"))
    call("dir list", lambda: os.listxattr(sub))
    call("link user", lambda: os.setxattr(link, "user.l", b"1", follow_symlinks=False))
    call("link trusted", lambda: os.setxattr(link, "trusted.l", b"1", follow_symlinks=False))
    call("link list", lambda: os.listxattr(link, follow_symlinks=False))
    call("through link", lambda: os.getxattr(link, "user.a"))
    call("fifo user", lambda: os.setxattr(fifo, "user.p", b"1"))
    call("fifo security", lambda: os.setxattr(fifo, "security.p", b"1"))
    fd = os.open(f, os.O_RDONLY)
    call("fd get", lambda: os.getxattr(fd, "user.a"))
    os.unlink(f)
    call("unlinked fd set", lambda: os.setxattr(fd, "user.u", b"1"))
    call("unlinked fd list", lambda: os.listxattr(fd))
    os.close(fd)
    open(f, "w").close()
    call("new file list", lambda: os.listxattr(f))
    os.chmod(d, 0o777)
    pid = os.fork()
    if pid == 0:
        os.setgid(65534)
        os.setuid(65534)
        lines = []
        for what, fn in [
            ("user set, not owner", lambda: os.setxattr(f, "user.x", b"1")),
            ("user get, not owner", lambda: os.getxattr(f, "user.a")),
            ("trusted get", lambda: os.getxattr(link, "trusted.l")),
            ("trusted set", lambda: os.setxattr(sub, "trusted.x", b"1")),
            ("security set", lambda: os.setxattr(sub, "security.x", b"1")),
            ("list as user", lambda: os.listxattr(link, follow_symlinks=False)),
        ]:
            try:
                lines.append(f"{what} -> {fn()!r}")
            except OSError as e:
                lines.append(f"{what} -> {os.strerror(e.errno)}")
        os.write(w, ("\n".join(lines) + "\n").encode())
        os._exit(0)
    os.waitpid(pid, 0)
    out.extend(os.read(r, 65536).decode().splitlines())
    return out


r, w = os.pipe()
ref, mnt = sys.argv[1], sys.argv[2]
a, b = script(ref), script(mnt)
if a != b:
    for x, y in zip(a, b):
        mark = "  " if x == y else "! "
        print(f"{mark}tmpfs: {x}\n{mark}mount: {y}" if x != y else f"  {x}")
    sys.exit(1)
print(f"{len(a)} calls, the same answers as tmpfs")
