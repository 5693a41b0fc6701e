/*
 * agentrt-exec: the process keeper of the docker sandbox (docs/services/tools.md, "docker").
 *
 * Built static by scripts/docker-sandbox-image.sh and baked into the sandbox image at
 * /.agentrt/agentrt-exec; the service copies it into containers of other images.
 *
 *   agentrt-exec --init            pid 1 of a sandbox container: reaps orphans, exits on TERM/INT.
 *   agentrt-exec --run MARK PROG…  runs PROG in a new session as a child subreaper: every
 *                                  process PROG starts (setsid'd, double-forked) stays below
 *                                  it. When PROG exits, or on SIGTERM/SIGINT/SIGHUP, every
 *                                  descendant is SIGKILLed and reaped before it exits with
 *                                  PROG's status (128+N for signal N; 137 when told to stop).
 *   agentrt-exec --kill MARK       sends SIGTERM to the --run keeper started with MARK.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 65536

static pid_t pids[MAX_PROCS], ppids[MAX_PROCS];

static int read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

/* SIGKILL every process whose parent chain reaches this one; returns how many. */
static int kill_descendants(void) {
    int count = 0, killed = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    struct dirent *entry;
    char path[300], buf[512];
    while ((entry = readdir(proc)) && count < MAX_PROCS) {
        if (!isdigit((unsigned char)entry->d_name[0])) continue;
        snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
        if (read_file(path, buf, sizeof buf) <= 0) continue;
        char *close_paren = strrchr(buf, ')');
        char state;
        int ppid;
        if (!close_paren || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2) continue;
        pids[count] = (pid_t)atoi(entry->d_name);
        ppids[count++] = (pid_t)ppid;
    }
    closedir(proc);
    pid_t self = getpid();
    /* Mark descendants by repeated passes (the process table is small in a container). */
    static char mine[MAX_PROCS];
    memset(mine, 0, (size_t)count);
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int i = 0; i < count; i++) {
            if (mine[i]) continue;
            int parent_is_mine = ppids[i] == self;
            for (int j = 0; !parent_is_mine && j < count; j++)
                parent_is_mine = mine[j] && pids[j] == ppids[i];
            if (parent_is_mine) mine[i] = changed = 1;
        }
    }
    for (int i = 0; i < count; i++)
        if (mine[i] && kill(pids[i], SIGKILL) == 0) killed++;
    return killed;
}

/* Kill the whole tree and reap it: returns once this process has no child left. */
static void kill_all(void) {
    for (;;) {
        kill_descendants();
        /* Each death may hand us orphans (we are their subreaper): rescan after each. */
        if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD) return;
    }
}

static int run(char *const argv[]) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("agentrt-exec: PR_SET_CHILD_SUBREAPER");
        return 126;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("agentrt-exec: fork");
        return 126;
    }
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        setsid();
        execvp(argv[0], argv);
        fprintf(stderr, "agentrt-exec: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig < 0) continue;
        if (sig != SIGCHLD) {
            kill_all();
            return 137;
        }
        int status;
        pid_t done;
        while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
            if (done == child) {
                kill_all();
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
        }
    }
}

static int init(void) {
    sigset_t set;
    sigfillset(&set);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig == SIGTERM || sig == SIGINT) return 0;
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
    }
}

static int kill_keeper(const char *mark) {
    DIR *proc = opendir("/proc");
    if (!proc) return 2;
    struct dirent *entry;
    char path[300], buf[4096];
    int found = 0;
    while ((entry = readdir(proc))) {
        if (!isdigit((unsigned char)entry->d_name[0])) continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", entry->d_name);
        int n = read_file(path, buf, sizeof buf);
        if (n <= 0) continue;
        /* argv: agentrt-exec\0--run\0MARK\0... */
        const char *argv0 = buf, *base = strrchr(argv0, '/');
        base = base ? base + 1 : argv0;
        size_t l0 = strlen(argv0) + 1;
        if (strcmp(base, "agentrt-exec") != 0 || (int)l0 >= n) continue;
        const char *arg1 = buf + l0;
        size_t l1 = strlen(arg1) + 1;
        if (strcmp(arg1, "--run") != 0 || (int)(l0 + l1) >= n) continue;
        if (strcmp(buf + l0 + l1, mark) != 0) continue;
        if (kill((pid_t)atoi(entry->d_name), SIGTERM) == 0) found++;
    }
    closedir(proc);
    return found ? 0 : 1;
}

int main(int argc, char *argv[]) {
    if (argc == 2 && strcmp(argv[1], "--init") == 0) return init();
    if (argc == 3 && strcmp(argv[1], "--kill") == 0) return kill_keeper(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "--run") == 0) return run(argv + 3);
    fprintf(stderr, "usage: agentrt-exec --init | --run MARK PROG [ARG...] | --kill MARK\n");
    return 2;
}
