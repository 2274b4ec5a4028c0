// The host's side of W5's miss path alone, for comparing its scaling with W5's: each thread
// lists its directories (getdents64) and fstatat's every entry, cycling over a tree of
// 16 x 1,000 empty files of its own, made in /dev/shm and removed at the end. Prints the
// objects stat'ed per second, over all threads, and thread 0's CPU time per object.
//
// Build and run (see BENCHMARKS.md, "An eviction that loads no inode"):
//   cc -O2 -Wall -pthread -o /tmp/host-miss-path scripts/host-miss-path.c
//   /tmp/host-miss-path 1 40; /tmp/host-miss-path 2 20     (THREADS ROUNDS)
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { DIRS = 16, FILES = 1000, MAX_THREADS = 16 };

static long rounds;
static char base[256];
static double cpu_per_object[MAX_THREADS];

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *run(void *arg) {
    long id = (long)arg, n = 0;
    static __thread char buf[65536];
    double c0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    for (long r = 0; r < rounds; r++) {
        for (int d = 0; d < DIRS; d++) {
            char path[512];
            snprintf(path, sizeof path, "%s/t%ld/d%02d", base, id, d);
            int fd = open(path, O_RDONLY | O_DIRECTORY);
            if (fd < 0) {
                perror(path);
                exit(1);
            }
            long k;
            while ((k = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
                for (long o = 0; o < k;) {
                    struct dirent64 *e = (struct dirent64 *)(buf + o);
                    o += e->d_reclen;
                    if (e->d_name[0] == '.') {
                        continue;
                    }
                    struct stat st;
                    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                        n++;
                    }
                }
            }
            close(fd);
        }
    }
    cpu_per_object[id] = (seconds(CLOCK_THREAD_CPUTIME_ID) - c0) / n * 1e9;
    return (void *)n;
}

int main(int argc, char **argv) {
    int threads = argc > 2 ? atoi(argv[1]) : 0;
    rounds = argc > 2 ? atol(argv[2]) : 0;
    if (threads < 1 || threads > MAX_THREADS || rounds < 1) {
        fprintf(stderr, "usage: host-miss-path THREADS (1-16) ROUNDS\n");
        return 2;
    }
    snprintf(base, sizeof base, "/dev/shm/host-miss-path.%d", getpid());
    char cmd[600];
    for (int t = 0; t < threads; t++) {
        for (int d = 0; d < DIRS; d++) {
            char dir[512];
            snprintf(dir, sizeof dir, "%s/t%d/d%02d", base, t, d);
            snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
            if (system(cmd) != 0) {
                return 1;
            }
            for (int f = 0; f < FILES; f++) {
                char file[600];
                snprintf(file, sizeof file, "%s/f%03d", dir, f);
                close(open(file, O_CREAT | O_WRONLY, 0644));
            }
        }
    }
    pthread_t th[MAX_THREADS];
    double t0 = seconds(CLOCK_MONOTONIC);
    long total = 0;
    for (long t = 0; t < threads; t++) {
        pthread_create(&th[t], 0, run, (void *)t);
    }
    for (int t = 0; t < threads; t++) {
        void *n;
        pthread_join(th[t], &n);
        total += (long)n;
    }
    double elapsed = seconds(CLOCK_MONOTONIC) - t0;
    printf("%d threads: %.0f objects/s total, %.1f ns of CPU per object (thread 0)\n", threads,
           total / elapsed, cpu_per_object[0]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    return system(cmd) == 0 ? 0 : 1;
}
