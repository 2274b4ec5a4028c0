"""Locks between two processes on a mount: while this process holds an exclusive flock(2),
then an fcntl(2) record lock, another process's non-blocking attempt must fail with
EAGAIN/EWOULDBLOCK, and succeed once it is released. Usage: python3 locks.py DIR"""
import errno
import fcntl
import subprocess
import sys

PATH = sys.argv[1] + "/lockfile"
TAKE = {
    "flock": "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)",
    "fcntl": "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)",
}


def other_process_tries(kind):
    code = (
        "import fcntl\n"
        f"f = open({PATH!r}, 'r+')\n"
        "try:\n"
        f"    {TAKE[kind]}\n"
        "    print('taken')\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


open(PATH, "w").close()
for kind in TAKE:
    f = open(PATH, "r+")
    if kind == "flock":
        fcntl.flock(f, fcntl.LOCK_EX)
    else:
        fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
    held = other_process_tries(kind)
    f.close()
    free = other_process_tries(kind)
    assert held in (str(errno.EAGAIN), str(errno.EACCES)), (kind, held)
    assert free == "taken", (kind, free)
print("flock and fcntl locks exclude another process, and are free once released")
