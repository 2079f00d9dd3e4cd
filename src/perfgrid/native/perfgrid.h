/*
 * What perfgrid's C programs share: the clock, CPU plans ("0,1|0|1", the format of
 * perfgrid.binding.describe), the CPU lists of the JSON report, dying with the parent,
 * and die(). A program defines PG_NAME (its name in error messages) before including
 * this header, which holds static inline functions only: each program stays one file to build.
 */
#ifndef PERFGRID_H
#define PERFGRID_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef PG_NAME
#error "define PG_NAME (the program's name) before including perfgrid.h"
#endif

/* Print what failed and errno's message; exit status 2. */
static inline void die(const char *what) {
    fprintf(stderr, PG_NAME ": %s: %s\n", what, strerror(errno));
    exit(2);
}

/* CLOCK_MONOTONIC, seconds. */
static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec * 1e-6; }

/* Have the kernel SIGKILL this process when `parent` dies; 0 if it is still alive
 * (checked after the prctl, which closes the window between fork and prctl). */
static inline int die_with_parent(pid_t parent) {
    return prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent ? -1 : 0;
}

/* "0,1" (up to `stop`) into a set; -1 if it is malformed or empty. */
static inline int parse_cpus(const char *text, const char *stop, cpu_set_t *set) {
    CPU_ZERO(set);
    while (text < stop && *text) {
        char *end;
        long cpu;
        if (*text == ',') {
            text++;
            continue;
        }
        cpu = strtol(text, &end, 10);
        if (end == text || cpu < 0 || cpu >= CPU_SETSIZE) return -1;
        CPU_SET(cpu, set);
        text = end;
    }
    return CPU_COUNT(set) ? 0 : -1;
}

/* "0|1|0,1" -> one set per list; returns how many lists it held, -1 if malformed. */
static inline int parse_plan(const char *text, cpu_set_t *sets, int max) {
    int n = 0;
    while (1) {
        const char *bar = strchr(text, '|');
        const char *stop = bar ? bar : text + strlen(text);
        if (n >= max || parse_cpus(text, stop, &sets[n]) != 0) return -1;
        n++;
        if (!bar) return n;
        text = bar + 1;
    }
}

/* The CPU lists of `sets` in the plan format, "0,1|0|1", to stdout (a JSON string's body). */
static inline void print_cpu_lists(const cpu_set_t *sets, long n) {
    for (long i = 0; i < n; i++) {
        int first = 1;
        if (i) putchar('|');
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
            if (!CPU_ISSET(cpu, &sets[i])) continue;
            printf(first ? "%d" : ",%d", cpu);
            first = 0;
        }
    }
}

#endif
