"""SQLite in WAL mode on a mount: four writer processes insert at once through one database
(WAL, its shared-memory index mmapped by all four, and POSIX locks between them), then the
row count and SQLite's integrity check must hold. Usage: python3 sqlite_wal.py DIR"""
import multiprocessing
import sqlite3
import sys

DB = sys.argv[1] + "/wal.db"
WRITERS, ROWS = 4, 200


def writer(i):
    c = sqlite3.connect(DB, timeout=60)
    for j in range(ROWS):
        c.execute("insert into t values (?, ?)", (i, j))
        c.commit()
    c.close()


c = sqlite3.connect(DB)
mode = c.execute("pragma journal_mode=wal").fetchone()[0]
assert mode == "wal", mode
c.execute("create table t (writer, n)")
c.commit()
procs = [multiprocessing.Process(target=writer, args=(i,)) for i in range(WRITERS)]
for p in procs:
    p.start()
for p in procs:
    p.join()
    assert p.exitcode == 0, p.exitcode
rows = c.execute("select count(*) from t").fetchone()[0]
check = c.execute("pragma integrity_check").fetchone()[0]
assert rows == WRITERS * ROWS and check == "ok", (rows, check)
print(f"{WRITERS} writers x {ROWS} rows in WAL mode: {rows} rows, integrity {check}")
