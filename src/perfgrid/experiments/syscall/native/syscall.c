/*
 * syscall (seed E3), native side: N worker processes, each pinned to its own
 * CPU list, each calling one cheap system function a fixed number of times.
 * The workers are forked and pinned first, then released together (the
 * parent closes a pipe they all block on); the measured part runs from that
 * release to the last worker's report. Prints one JSON line.
 *
 *   syscall CALL CALLS_PER_WORKER PLAN
 *
 * CALL: getuid | getppid | clock_gettime (the last one is served by the vDSO,
 * no kernel entry). PLAN: one CPU list per worker, "0,1|0|1" (the format of
 * perfgrid.binding.describe); its number of lists is the number of workers.
 */
#define _GNU_SOURCE
#define PG_NAME "syscall"
#include "perfgrid.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>

#define MAX_WORKERS 4096

enum call { GETUID, GETPPID, CLOCK_GETTIME };

struct result {
    int index;
    double elapsed_s;
    double user_s;
    double sys_s;
};

static volatile unsigned long sink;

/* The measured loop: the result feeds a volatile sink so no call is elided. */
static void run_calls(enum call call, long n) {
    unsigned long acc = 0;
    struct timespec ts;
    long i;
    switch (call) {
    case GETUID:
        for (i = 0; i < n; i++) acc += getuid();
        break;
    case GETPPID:
        for (i = 0; i < n; i++) acc += getppid();
        break;
    case CLOCK_GETTIME:
        for (i = 0; i < n; i++) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            acc += ts.tv_nsec;
        }
        break;
    }
    sink = acc;
}

static void worker(int index, enum call call, long n, const cpu_set_t *cpus, pid_t parent,
                   int ready_w, int start_r, int result_w) {
    struct rusage before, after;
    struct result res;
    char byte;
    double t0;

    if (die_with_parent(parent) != 0) _exit(3);
    if (sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) _exit(4);
    if (write(ready_w, &index, sizeof index) != sizeof index) _exit(5);
    close(ready_w); /* so the parent sees EOF, not a hang, if a sibling dies early */
    if (read(start_r, &byte, 1) != 0) _exit(6); /* EOF: the parent released everyone */
    getrusage(RUSAGE_SELF, &before);
    t0 = now();
    run_calls(call, n);
    res.elapsed_s = now() - t0;
    getrusage(RUSAGE_SELF, &after);
    res.index = index;
    res.user_s = seconds(after.ru_utime) - seconds(before.ru_utime);
    res.sys_s = seconds(after.ru_stime) - seconds(before.ru_stime);
    if (write(result_w, &res, sizeof res) != sizeof res) _exit(7);
    _exit(0);
}

/* Read exactly `size` bytes (records are written whole, below PIPE_BUF). */
static void read_full(int fd, void *buf, size_t size) {
    size_t done = 0;
    while (done < size) {
        ssize_t got = read(fd, (char *)buf + done, size - done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            fprintf(stderr, "syscall: a worker ended before reporting\n");
            exit(2);
        }
        done += (size_t)got;
    }
}

int main(int argc, char **argv) {
    static cpu_set_t plan[MAX_WORKERS], actual[MAX_WORKERS];
    static pid_t pids[MAX_WORKERS];
    static struct result results[MAX_WORKERS];
    int ready[2], start[2], result[2];
    enum call call;
    long n;
    int workers, failed = 0;
    double t0, elapsed, user = 0, sys = 0;
    pid_t self = getpid();

    if (argc != 4) {
        fprintf(stderr, "usage: %s getuid|getppid|clock_gettime CALLS_PER_WORKER PLAN\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "getuid") == 0) call = GETUID;
    else if (strcmp(argv[1], "getppid") == 0) call = GETPPID;
    else if (strcmp(argv[1], "clock_gettime") == 0) call = CLOCK_GETTIME;
    else {
        fprintf(stderr, "syscall: unknown call %s\n", argv[1]);
        return 2;
    }
    n = strtol(argv[2], NULL, 10);
    workers = parse_plan(argv[3], plan, MAX_WORKERS);
    if (n < 1 || workers < 1) {
        fprintf(stderr, "syscall: bad CALLS_PER_WORKER or PLAN\n");
        return 2;
    }
    /* this process dies with the harness (started through perfgrid.lifetime.command);
       each worker dies with this process */
    if (pipe(ready) || pipe(start) || pipe(result)) die("pipe");

    for (int i = 0; i < workers; i++) {
        pids[i] = fork();
        if (pids[i] < 0) die("fork");
        if (pids[i] == 0) {
            close(ready[0]);
            close(start[1]);
            close(result[0]);
            worker(i, call, n, &plan[i], self, ready[1], start[0], result[1]);
        }
    }
    close(ready[1]);
    close(start[0]);
    close(result[1]);
    for (int i = 0; i < workers; i++) {
        int index;
        read_full(ready[0], &index, sizeof index);
    }
    for (int i = 0; i < workers; i++)
        if (sched_getaffinity(pids[i], sizeof(cpu_set_t), &actual[i]) != 0) die("sched_getaffinity");

    t0 = now();
    close(start[1]); /* release */
    for (int i = 0; i < workers; i++) {
        struct result res;
        read_full(result[0], &res, sizeof res);
        results[res.index] = res;
    }
    elapsed = now() - t0;

    for (int i = 0; i < workers; i++) {
        int status;
        if (waitpid(pids[i], &status, 0) < 0) die("waitpid");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
        user += results[i].user_s;
        sys += results[i].sys_s;
    }
    if (failed) {
        fprintf(stderr, "syscall: %d workers failed\n", failed);
        return 2;
    }

    printf("{\"call\": \"%s\", \"workers\": %d, \"calls_per_worker\": %ld, \"elapsed_s\": %.9f, "
           "\"user_s\": %.6f, \"sys_s\": %.6f, \"worker_elapsed_s\": [",
           argv[1], workers, n, elapsed, user, sys);
    for (int i = 0; i < workers; i++) printf(i ? ", %.9f" : "%.9f", results[i].elapsed_s);
    printf("], \"worker_cpus\": \"");
    print_cpu_lists(actual, workers);
    printf("\"}\n");
    return 0;
}
