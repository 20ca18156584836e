/*
 * The floor for `throng server --mode push`: the smallest correct epoll
 * server doing the same work. One epoll loop per thread, each with its own
 * SO_REUSEPORT listener and a timerfd that fires at each 1 ms slot of the
 * period; a connection is given a slot in turn when accepted and is sent
 * one message there every period (the same 32-byte header as throng's:
 * "THRP", length, sequence number, monotonic and wall send times; then
 * SIZE bytes). A message the socket does not take whole is dropped
 * (counted; a partial write's rest is kept and sent first). Reads are
 * drained and dropped.
 *
 * Usage: push PORT THREADS PERIOD_MS SIZE SECONDS
 * Prints "listening on 127.0.0.1:PORT" once every listener is bound, and
 * after SECONDS or at SIGTERM/SIGINT: "due N on_time N late N skipped N"
 * (late: more than 1 ms after its slot), then exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD (1 << 20)
#define MAX_SLOTS 1000

static int port, period_ms, size;
static uint64_t due_total, on_time_total, late_total, skipped_total;
static pthread_mutex_t totals = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

struct conn {
    uint64_t seq;
    int slot, at;   /* its slot, its place in the slot's list */
    int rest;       /* bytes of a partial message still to send */
    int rest_off;
    unsigned char *rest_buf;
};

struct slot {
    int *fds;
    int n, cap;
};

static uint64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = v & 0xff;
        v >>= 8;
    }
}

static int listener(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 65535)) {
        perror("bind/listen");
        exit(1);
    }
    return fd;
}

static void *worker(void *arg) {
    int lfd = *(int *)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    ev.data.fd = tfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    int nslots = period_ms < 1 ? 1 : (period_ms > MAX_SLOTS ? MAX_SLOTS : period_ms);
    uint64_t period = (uint64_t)period_ms * 1000000ull, slot_ns = period / nslots;
    struct slot *slots = calloc(nslots, sizeof *slots);
    struct conn *conns = calloc(MAX_FD, sizeof *conns);
    int len = 32 + size, turn = 0, cursor = 0;
    unsigned char *msg = calloc(1, len);
    memcpy(msg, "THRP", 4);
    msg[4] = len >> 24; msg[5] = len >> 16; msg[6] = len >> 8; msg[7] = len;
    memset(msg + 32, 'p', size);
    uint64_t next = now_ns(CLOCK_MONOTONIC) + slot_ns;
    uint64_t due = 0, on_time = 0, late = 0, skipped = 0;
    char buf[65536];
    struct epoll_event events[1024];
    struct itimerspec its = {0};
    its.it_value.tv_sec = next / 1000000000ull;
    its.it_value.tv_nsec = next % 1000000000ull;
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    while (!stop) {
        int n = epoll_wait(ep, events, 1024, 100);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct slot *s = &slots[turn];
                    if (s->n == s->cap) {
                        s->cap = s->cap ? 2 * s->cap : 16;
                        s->fds = realloc(s->fds, s->cap * sizeof(int));
                    }
                    conns[c] = (struct conn){.slot = turn, .at = s->n};
                    s->fds[s->n++] = c;
                    turn = (turn + 1) % nslots;
                    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
                    ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
            } else if (fd == tfd) {
                uint64_t x;
                if (read(tfd, &x, sizeof x) < 0) {}
                uint64_t now = now_ns(CLOCK_MONOTONIC);
                while (next <= now) {
                    struct slot *s = &slots[cursor];
                    uint64_t at = next;
                    cursor = (cursor + 1) % nslots;
                    next += slot_ns;
                    due += s->n;
                    for (int k = 0; k < s->n; k++) {
                        struct conn *c = &conns[s->fds[k]];
                        uint64_t seq = c->seq++;
                        if (c->rest) {
                            skipped++;
                            continue;
                        }
                        uint64_t t = now_ns(CLOCK_MONOTONIC);
                        put64(msg + 8, seq);
                        put64(msg + 16, t);
                        put64(msg + 24, now_ns(CLOCK_REALTIME));
                        ssize_t w = write(s->fds[k], msg, len);
                        if (w < 0) {
                            if (errno == EAGAIN) skipped++;
                            continue;
                        }
                        if (w < len) {
                            c->rest_buf = realloc(c->rest_buf, len);
                            memcpy(c->rest_buf, msg, len);
                            c->rest = len - w;
                            c->rest_off = w;
                        }
                        if (t - at > 1000000) late++; else on_time++;
                    }
                }
                its.it_value.tv_sec = next / 1000000000ull;
                its.it_value.tv_nsec = next % 1000000000ull;
                timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
            } else {
                struct conn *c = &conns[fd];
                if (events[i].events & EPOLLOUT && c->rest) {
                    ssize_t w = write(fd, c->rest_buf + c->rest_off, c->rest);
                    if (w > 0) { c->rest -= w; c->rest_off += w; }
                }
                if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                    ssize_t r;
                    while ((r = read(fd, buf, sizeof buf)) > 0) {}
                    if (r == 0 || (r < 0 && errno != EAGAIN)) {
                        struct slot *s = &slots[c->slot];
                        int last = s->fds[--s->n];
                        s->fds[c->at] = last;
                        conns[last].at = c->at;
                        free(c->rest_buf);
                        conns[fd] = (struct conn){0};
                        close(fd);
                    }
                }
            }
        }
    }
    pthread_mutex_lock(&totals);
    due_total += due; on_time_total += on_time; late_total += late; skipped_total += skipped;
    pthread_mutex_unlock(&totals);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: push PORT THREADS PERIOD_MS SIZE SECONDS\n");
        return 2;
    }
    port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    period_ms = atoi(argv[3]);
    size = atoi(argv[4]);
    int seconds = atoi(argv[5]);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    pthread_t *t = calloc(threads, sizeof *t);
    int *fds = calloc(threads, sizeof *fds);
    for (int i = 0; i < threads; i++) fds[i] = listener();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, &fds[i]);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    for (int s = 0; s < seconds * 10 && !stop; s++) usleep(100000);
    stop = 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("due %lu on_time %lu late %lu skipped %lu\n", (unsigned long)due_total,
           (unsigned long)on_time_total, (unsigned long)late_total, (unsigned long)skipped_total);
    return 0;
}
