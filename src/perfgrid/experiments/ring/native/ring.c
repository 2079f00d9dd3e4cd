/*
 * ring (seed E5 b), native side: one ring of WORKERS processes linked by
 * pipes passes a one-byte token ROUNDS times around. This process is member
 * 0; it forks the other members, each pinned to its CPU list, sends the
 * token once around to know every member is ready (the set-up), then times
 * ROUNDS trips with CLOCK_MONOTONIC. Prints one JSON line: the passing's
 * wall time, the set-up's, user/sys CPU and context switches of the passing
 * (this process's share measured around it, the members' from wait4, which
 * includes their negligible set-up), and the CPUs each member really had.
 *
 *   ring WORKERS ROUNDS PLAN
 *
 * PLAN: the CPU list of each member, "0,1|0|1" (perfgrid.binding.describe);
 * it must list WORKERS entries. Closing this process's write end ends the
 * ring: each member sees end of file, exits, and so closes the next pipe.
 * This process dies with its parent (PR_SET_PDEATHSIG), which ends the ring
 * the same way.
 */
#define _GNU_SOURCE
#define PG_NAME "ring"
#include "perfgrid.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>

#define MAX_WORKERS 1024

/* Read one byte; 0 at end of file. */
static int get_token(int fd, char *token) {
    for (;;) {
        ssize_t n = read(fd, token, 1);
        if (n == 1) return 1;
        if (n == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

static int put_token(int fd, char token) {
    for (;;) {
        ssize_t n = write(fd, &token, 1);
        if (n == 1) return 1;
        if (n < 0 && errno != EINTR) return -1;
    }
}

/* A member other than 0: pass whatever arrives to the next until end of file. */
static void relay(int in, int out) {
    char token;
    while (get_token(in, &token) == 1)
        if (put_token(out, token) != 1) break;
    _exit(0);
}

int main(int argc, char **argv) {
    static cpu_set_t plan[MAX_WORKERS];
    static int pipes[MAX_WORKERS][2]; /* pipes[i]: into member i */
    static pid_t pids[MAX_WORKERS];
    char *end;
    long workers, rounds;
    char token = 'x';

    if (argc != 4) {
        fprintf(stderr, "usage: ring WORKERS ROUNDS PLAN\n");
        return 2;
    }
    workers = strtol(argv[1], &end, 10);
    if (*end || workers < 2 || workers > MAX_WORKERS) {
        fprintf(stderr, "ring: WORKERS must be 2..%d, got %s\n", MAX_WORKERS, argv[1]);
        return 2;
    }
    rounds = strtol(argv[2], &end, 10);
    if (*end || rounds < 1) {
        fprintf(stderr, "ring: ROUNDS must be a positive integer, got %s\n", argv[2]);
        return 2;
    }
    if (parse_plan(argv[3], plan, MAX_WORKERS) != workers) {
        fprintf(stderr, "ring: PLAN must hold %ld CPU lists, got %s\n", workers, argv[3]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* die with the job that started us; the members then read end of file and exit */
    pid_t parent = getppid();
    if (die_with_parent(parent) != 0) return 2;

    double setup_start = now();
    for (long i = 0; i < workers; i++)
        if (pipe(pipes[i]) != 0) die("pipe");
    for (long i = 1; i < workers; i++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            long next = (i + 1) % workers;
            for (long j = 0; j < workers; j++) {
                if (j != i) close(pipes[j][0]);
                if (j != next) close(pipes[j][1]);
            }
            if (sched_setaffinity(0, sizeof(cpu_set_t), &plan[i]) != 0) _exit(3);
            relay(pipes[i][0], pipes[next][1]);
        }
        pids[i] = pid;
    }
    for (long j = 0; j < workers; j++) {
        if (j != 0) close(pipes[j][0]);
        if (j != 1) close(pipes[j][1]);
    }
    int in = pipes[0][0], out = pipes[1][1];
    if (sched_setaffinity(0, sizeof(cpu_set_t), &plan[0]) != 0) die("sched_setaffinity");
    /* one trip: every member is pinned and waiting */
    if (put_token(out, token) != 1 || get_token(in, &token) != 1) die("first trip");
    double setup = now() - setup_start;

    /* every member's whole CPU list: unbound members of a large machine list them all */
    static cpu_set_t had[MAX_WORKERS];
    for (long i = 0; i < workers; i++)
        if (sched_getaffinity(i ? pids[i] : 0, sizeof had[i], &had[i]) != 0)
            die("sched_getaffinity");

    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    for (long r = 0; r < rounds; r++) {
        if (put_token(out, token) != 1) die("write");
        if (get_token(in, &token) != 1) die("read");
    }
    double elapsed = now() - start;
    getrusage(RUSAGE_SELF, &after);

    double user = seconds(after.ru_utime) - seconds(before.ru_utime);
    double sys = seconds(after.ru_stime) - seconds(before.ru_stime);
    long nvcsw = after.ru_nvcsw - before.ru_nvcsw;
    long nivcsw = after.ru_nivcsw - before.ru_nivcsw;
    close(out);
    close(in);
    int failed = 0;
    for (long i = 1; i < workers; i++) {
        int status;
        struct rusage child;
        if (wait4(pids[i], &status, 0, &child) < 0) die("wait4");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
        user += seconds(child.ru_utime);
        sys += seconds(child.ru_stime);
        nvcsw += child.ru_nvcsw;
        nivcsw += child.ru_nivcsw;
    }
    if (failed) {
        fprintf(stderr, "ring: %d members failed\n", failed);
        return 1;
    }
    printf("{\"workers\": %ld, \"rounds\": %ld, \"messages\": %ld, \"seconds\": %.9f, "
           "\"setup_seconds\": %.9f, \"user_s\": %.6f, \"sys_s\": %.6f, "
           "\"ctx_voluntary\": %ld, \"ctx_involuntary\": %ld, \"cpus\": \"",
           workers, rounds, workers * rounds, elapsed, setup, user, sys, nvcsw, nivcsw);
    print_cpu_lists(had, workers);
    printf("\"}\n");
    return 0;
}
