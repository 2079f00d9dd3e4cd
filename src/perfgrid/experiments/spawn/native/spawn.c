/*
 * spawn (seed E1), native side: TOTAL spawns split into CHAINS chains that
 * run at once. Prints one JSON line with the measured part's wall time, the
 * user/sys CPU of this process and its reaped children, and peak RSS.
 *
 *   spawn PRIMITIVE CHAINS TOTAL CHAIN_PLAN RUNNER_CPUS
 *
 * PRIMITIVE:
 *   pthread      each thread joins its predecessor, creates the next one and
 *                ends; the last one tells the parent, which joins it.
 *   fork         each process forks the next one and exits; this process is a
 *                child subreaper, so every unit (orphaned or not) is reaped here.
 *   posix_spawn  /bin/true cannot start anything, so each chain is a thread
 *                that spawns /bin/true and waits for it, serially.
 * CHAIN_PLAN: the CPU list of each chain, "0|1|0,1" (perfgrid.binding.describe);
 * it must list CHAINS entries. RUNNER_CPUS: the CPU list of this process.
 */
#define _GNU_SOURCE
#define PG_NAME "spawn"
#include "perfgrid.h"

#include <pthread.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>

#define MAX_CHAINS 100000
#define TRUE_PATH "/bin/true"

extern char **environ;

static cpu_set_t *plan;
static long *lengths;
static int chains;

/* pthread chains */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_done = PTHREAD_COND_INITIALIZER;
static int finished;
static long failures;
static pthread_t *last;

struct unit {
    pthread_t prev;
    int has_prev;
    int chain;
    long left;
};

/* VmHWM: unlike ru_maxrss it starts afresh at exec, not at the fork before it. */
static long peak_rss_kb(void) {
    char line[256];
    long kb = -1;
    FILE *status = fopen("/proc/self/status", "r");
    if (!status) return -1;
    while (fgets(line, sizeof line, status))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1) break;
    fclose(status);
    return kb;
}

static void chain_done(pthread_t self, int chain, int failed) {
    pthread_mutex_lock(&lock);
    last[chain] = self;
    failures += failed;
    if (++finished == chains) pthread_cond_signal(&all_done);
    pthread_mutex_unlock(&lock);
}

static void *thread_unit(void *arg) {
    struct unit u = *(struct unit *)arg;
    free(arg);
    if (!u.has_prev) pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &plan[u.chain]);
    else pthread_join(u.prev, NULL);
    if (u.left > 1) {
        pthread_t next;
        struct unit *n = malloc(sizeof *n);
        if (n) {
            n->prev = pthread_self();
            n->has_prev = 1;
            n->chain = u.chain;
            n->left = u.left - 1;
            if (pthread_create(&next, NULL, thread_unit, n) == 0) return NULL;
            free(n);
        }
        chain_done(pthread_self(), u.chain, 1); /* could not go on: report, not hang */
        return NULL;
    }
    chain_done(pthread_self(), u.chain, 0);
    return NULL;
}

static long run_pthread(void) {
    pthread_t first;
    last = calloc(chains, sizeof *last);
    for (int c = 0; c < chains; c++) {
        struct unit *u = malloc(sizeof *u);
        if (!u || !last) die("malloc");
        u->has_prev = 0;
        u->chain = c;
        u->left = lengths[c];
        if (pthread_create(&first, NULL, thread_unit, u) != 0) die("pthread_create");
    }
    pthread_mutex_lock(&lock);
    while (finished < chains) pthread_cond_wait(&all_done, &lock);
    pthread_mutex_unlock(&lock);
    for (int c = 0; c < chains; c++) pthread_join(last[c], NULL);
    return failures;
}

/* One fork chain, run by its first unit: fork the next unit, exit. A unit
 * whose parent is neither its predecessor nor the runner was orphaned by a
 * dead runner, and stops the chain rather than outlive the job. */
static void fork_chain(long length, pid_t runner, const cpu_set_t *cpus) {
    pid_t pred = runner;
    sched_setaffinity(0, sizeof(cpu_set_t), cpus);
    for (long left = length; left > 1; left--) {
        pid_t parent = getppid();
        pid_t child;
        if (parent != pred && parent != runner) _exit(3);
        pred = getpid();
        child = fork();
        if (child < 0) _exit(errno == EAGAIN ? 4 : 2);
        if (child > 0) _exit(0);
    }
    _exit(0);
}

/* why fork units failed, for the error message: a unit's exit status says */
static long fork_refused_eagain, fork_refused_other, fork_orphaned, fork_unreaped;

static long run_fork(long total) {
    pid_t runner = getpid();
    long reaped = 0, bad = 0;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) die("prctl(PR_SET_CHILD_SUBREAPER)");
    for (int c = 0; c < chains; c++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) fork_chain(lengths[c], runner, &plan[c]);
    }
    while (reaped < total) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            if (errno == ECHILD) break; /* a chain broke: fewer units than planned */
            die("waitpid");
        }
        reaped++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 4) fork_refused_eagain++;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2) fork_refused_other++;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3) fork_orphaned++;
    }
    fork_unreaped = total > reaped ? total - reaped : 0;
    return bad + fork_unreaped;
}

/* posix_spawn chains */
static pthread_barrier_t ready;

static void *spawn_chain(void *arg) {
    long c = (long)arg, bad = 0;
    char *argv[] = {"true", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &plan[c]);
    pthread_barrier_wait(&ready);
    for (long i = 0; i < lengths[c]; i++) {
        pid_t pid;
        int status;
        if (posix_spawn(&pid, TRUE_PATH, NULL, NULL, argv, envp) != 0) {
            bad += lengths[c] - i;
            break;
        }
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    }
    return (void *)bad;
}

int main(int argc, char **argv) {
    struct rusage self0, kids0, self1, kids1;
    cpu_set_t runner_cpus;
    const char *primitive;
    long total, bad = 0;
    double t0 = 0, elapsed;
    pthread_t *threads = NULL;

    if (argc != 6) {
        fprintf(stderr, "usage: %s pthread|fork|posix_spawn CHAINS TOTAL CHAIN_PLAN RUNNER_CPUS\n",
                argv[0]);
        return 2;
    }
    primitive = argv[1];
    chains = (int)strtol(argv[2], NULL, 10);
    total = strtol(argv[3], NULL, 10);
    if (chains < 1 || chains > MAX_CHAINS || total < chains) {
        fprintf(stderr, "spawn: need 1 <= CHAINS <= TOTAL\n");
        return 2;
    }
    plan = calloc(chains, sizeof *plan);
    lengths = calloc(chains, sizeof *lengths);
    if (!plan || !lengths) die("calloc");
    if (parse_plan(argv[4], plan, chains) != chains || parse_cpus(argv[5], argv[5] + strlen(argv[5]),
                                                                  &runner_cpus) != 0) {
        fprintf(stderr, "spawn: CHAIN_PLAN needs %d CPU lists; RUNNER_CPUS one\n", chains);
        return 2;
    }
    for (int c = 0; c < chains; c++) lengths[c] = total / chains + (c < total % chains);
    /* this process dies with the harness (started through perfgrid.lifetime.command) */
    if (sched_setaffinity(0, sizeof(cpu_set_t), &runner_cpus) != 0) die("sched_setaffinity");

    if (strcmp(primitive, "posix_spawn") == 0) {
        threads = calloc(chains, sizeof *threads);
        if (!threads || pthread_barrier_init(&ready, NULL, chains + 1) != 0) die("barrier");
        for (long c = 0; c < chains; c++)
            if (pthread_create(&threads[c], NULL, spawn_chain, (void *)c) != 0) die("pthread_create");
    } else if (strcmp(primitive, "pthread") != 0 && strcmp(primitive, "fork") != 0) {
        fprintf(stderr, "spawn: unknown primitive %s\n", primitive);
        return 2;
    }

    getrusage(RUSAGE_SELF, &self0);
    getrusage(RUSAGE_CHILDREN, &kids0);
    if (threads) {
        t0 = now();
        pthread_barrier_wait(&ready);
        for (int c = 0; c < chains; c++) {
            void *chain_bad;
            pthread_join(threads[c], &chain_bad);
            bad += (long)chain_bad;
        }
    } else if (strcmp(primitive, "pthread") == 0) {
        t0 = now();
        bad = run_pthread();
    } else {
        t0 = now();
        bad = run_fork(total);
    }
    elapsed = now() - t0;
    getrusage(RUSAGE_SELF, &self1);
    getrusage(RUSAGE_CHILDREN, &kids1);

    if (bad) {
        fprintf(stderr, "spawn: %ld of %ld spawns failed\n", bad, total);
        if (strcmp(primitive, "fork") == 0)
            fprintf(stderr, "spawn: fork units: %ld refused with EAGAIN, %ld refused otherwise, "
                    "%ld orphaned, %ld never started\n", fork_refused_eagain,
                    fork_refused_other, fork_orphaned, fork_unreaped);
        return 2;
    }
    printf("{\"primitive\": \"%s\", \"chains\": %d, \"spawns\": %ld, \"elapsed_s\": %.9f, "
           "\"user_s\": %.6f, \"sys_s\": %.6f, \"maxrss_kb\": %ld, \"children_maxrss_kb\": %ld}\n",
           primitive, chains, total, elapsed,
           seconds(self1.ru_utime) - seconds(self0.ru_utime) + seconds(kids1.ru_utime) -
               seconds(kids0.ru_utime),
           seconds(self1.ru_stime) - seconds(self0.ru_stime) + seconds(kids1.ru_stime) -
               seconds(kids0.ru_stime),
           peak_rss_kb(), kids1.ru_maxrss);
    return 0;
}
