/*
 * The floor for `throng client`: the smallest correct epoll client doing
 * the same work, with no measuring beyond a count.
 *
 * load:    client load HOST PORT CONNS WINDOW SECONDS echo|http [SIZE]
 *          keeps WINDOW requests in flight on each of CONNS connections
 *          (echo: SIZE-byte messages, default 64; http: GET / requests)
 *          for SECONDS, then prints "responses N seconds S rate R".
 * paced:   client paced HOST PORT CONNS RATE SECONDS [SIZE] [poisson|constant]
 *          sends SIZE-byte echo queries (default 64) at RATE a second for
 *          SECONDS, each due time's query on the next connection in turn
 *          (queued behind one in flight, as pipelining would), arrivals
 *          Poisson by default; a timerfd wakes it for the next due time.
 *          Each response time counts from its query's due time; prints
 *          "answered N seconds S rate R p50_us A p99_us B lag_p99_us C".
 * connect: client connect SOURCE_IP HOST PORT N [hold]
 *          opens N connections from SOURCE_IP (non-blocking, up to 1024 in
 *          flight), holds them, and prints "established N seconds S rate R"
 *          once all are up (or failed), then exits; with "hold", keeps
 *          them open until it is sent a signal.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static const char REQUEST[] = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static struct sockaddr_in addr(const char *ip, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

struct conn {
    size_t have;     /* bytes of the current response read */
    size_t need;     /* its length, once known (http) */
    char head[1024]; /* http: the response head so far */
};

/* http: consumes bytes of responses; returns complete responses. */
static long http_feed(struct conn *c, const char *p, size_t n) {
    long done = 0;
    while (n) {
        if (!c->need) {
            size_t room = sizeof c->head - 1 - c->have, take = n < room ? n : room;
            memcpy(c->head + c->have, p, take);
            c->head[c->have + take] = 0;
            char *end = strstr(c->head, "\r\n\r\n");
            if (!end) {
                c->have += take;
                p += take;
                n -= take;
                continue;
            }
            size_t head_len = end + 4 - c->head;
            char *cl = strcasestr(c->head, "content-length:");
            c->need = head_len + (cl ? strtoul(cl + 15, NULL, 10) : 0);
            /* the bytes past the head in this chunk */
            size_t used = head_len - c->have;
            c->have = head_len;
            p += used;
            n -= used;
        }
        size_t want = c->need - c->have, take = n < want ? n : want;
        c->have += take;
        p += take;
        n -= take;
        if (c->have == c->need) {
            done++;
            c->have = c->need = 0;
        }
    }
    return done;
}

/* CONNS blocking connects to A (TCP_NODELAY), each in epoll set EP for
 * reading with its index as data; NULL if one fails. */
static int *connect_all(struct sockaddr_in a, int conns, int ep) {
    int *fds = calloc(conns, sizeof *fds);
    for (int i = 0; i < conns; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return NULL;
        }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fds[i] = s;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
    }
    return fds;
}

static int load(int argc, char **argv) {
    if (argc < 8)
        return 2;
    struct sockaddr_in a = addr(argv[2], atoi(argv[3]));
    int conns = atoi(argv[4]), window = atoi(argv[5]);
    double secs = atof(argv[6]);
    int http = !strcmp(argv[7], "http");
    size_t size = argc > 8 ? strtoul(argv[8], NULL, 10) : 64;
    char *msg = http ? (char *)REQUEST : calloc(1, size);
    size_t msg_len = http ? sizeof REQUEST - 1 : size;
    char *burst = malloc(msg_len * window);
    for (int w = 0; w < window; w++)
        memcpy(burst + w * msg_len, msg, msg_len);
    int ep = epoll_create1(0);
    struct conn *cs = calloc(conns + 1024, sizeof *cs);
    int *fds = connect_all(a, conns, ep);
    if (!fds)
        return 1;
    double start = now(), end = start + secs;
    for (int i = 0; i < conns; i++)
        if (write(fds[i], burst, msg_len * window) != (ssize_t)(msg_len * window))
            return 1;
    long responses = 0;
    static char buf[65536];
    struct epoll_event evs[256];
    while (now() < end) {
        int n = epoll_wait(ep, evs, 256, 10);
        for (int k = 0; k < n; k++) {
            int i = evs[k].data.u32;
            ssize_t r = read(fds[i], buf, sizeof buf);
            if (r <= 0) {
                fprintf(stderr, "connection %d closed\n", i);
                return 1;
            }
            long done;
            if (http) {
                done = http_feed(&cs[i], buf, r);
            } else {
                cs[i].have += r;
                done = cs[i].have / msg_len;
                cs[i].have %= msg_len;
            }
            responses += done;
            /* one new request per response: the window stays full */
            while (done > 0) {
                long b = done < window ? done : window;
                if (write(fds[i], burst, msg_len * b) != (ssize_t)(msg_len * b))
                    return 1;
                done -= b;
            }
        }
    }
    double took = now() - start;
    printf("responses %ld seconds %.3f rate %.0f\n", responses, took, responses / took);
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* The P quantile of the N values V, sorted. */
static unsigned pct(const unsigned *v, long n, double p) {
    if (!n)
        return 0;
    long i = (long)ceil(p * n) - 1;
    return v[i < 0 ? 0 : i];
}

#define QUEUE 64 /* due times a connection holds in flight at most */

struct pconn {
    size_t have;         /* bytes of the current response read */
    int head, len;       /* its queue of due times */
    double due[QUEUE];
};

static int paced(int argc, char **argv) {
    if (argc < 7)
        return 2;
    struct sockaddr_in a = addr(argv[2], atoi(argv[3]));
    int conns = atoi(argv[4]);
    double rate = atof(argv[5]), secs = atof(argv[6]);
    size_t size = argc > 7 ? strtoul(argv[7], NULL, 10) : 64;
    int poisson = !(argc > 8 && !strcmp(argv[8], "constant"));
    char *msg = calloc(1, size);
    static char buf[65536];
    int ep = epoll_create1(0), tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct pconn *cs = calloc(conns, sizeof *cs);
    int *fds = connect_all(a, conns, ep);
    if (!fds)
        return 1;
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = conns};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    /* Poisson counts run past rate * secs by a few standard deviations */
    long cap = (long)(rate * secs * 1.1) + 1000, answered = 0, sent = 0, lags = 0, over = 0;
    unsigned *lat = malloc(cap * sizeof *lat), *lag = malloc(cap * sizeof *lag);
    srand48(1);
    double start = now(), end = start + secs, due = start;
    int next = 0;
    struct epoll_event evs[256];
    for (;;) {
        double t = now();
        while (due <= t && due < end) { /* every query due by now, each on its own */
            struct pconn *c = &cs[next];
            if (c->len == QUEUE) {
                over++;
            } else {
                if (write(fds[next], msg, size) != (ssize_t)size)
                    return 1;
                c->due[(c->head + c->len++) % QUEUE] = due;
                if (lags < cap)
                    lag[lags++] = (unsigned)((t - due) * 1e6);
                sent++;
            }
            next = (next + 1) % conns;
            due += poisson ? -log(1 - drand48()) / rate : 1 / rate;
            t = now();
        }
        if (due >= end && answered >= sent)
            break;
        if (t > end + 5)
            break; /* answers still missing 5 s after the end */
        double wake = due < end ? due : t + 0.01;
        struct itimerspec it = {.it_value = {(time_t)wake, (long)((wake - (time_t)wake) * 1e9)}};
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL);
        int n = epoll_wait(ep, evs, 256, -1);
        double got = now();
        for (int k = 0; k < n; k++) {
            int i = evs[k].data.u32;
            if (i == conns) {
                unsigned long long x;
                if (read(tfd, &x, sizeof x) < 0 && errno != EAGAIN)
                    return 1;
                continue;
            }
            ssize_t r = read(fds[i], buf, sizeof buf);
            if (r <= 0) {
                fprintf(stderr, "connection %d closed\n", i);
                return 1;
            }
            struct pconn *c = &cs[i];
            c->have += r;
            for (; c->have >= size && c->len; c->have -= size, c->len--) {
                if (answered < cap)
                    lat[answered] = (unsigned)((got - c->due[c->head]) * 1e6);
                answered++;
                c->head = (c->head + 1) % QUEUE;
            }
        }
    }
    double took = now() - start;
    long kept = answered < cap ? answered : cap;
    qsort(lat, kept, sizeof *lat, cmp_u32);
    qsort(lag, lags, sizeof *lag, cmp_u32);
    printf("answered %ld seconds %.3f rate %.0f p50_us %u p99_us %u lag_p99_us %u unsent %ld\n",
           answered, took, answered / took, pct(lat, kept, 0.5), pct(lat, kept, 0.99),
           pct(lag, lags, 0.99), over);
    return 0;
}

static int connect_many(int argc, char **argv) {
    if (argc < 6)
        return 2;
    struct sockaddr_in src = addr(argv[2], 0), dst = addr(argv[3], atoi(argv[4]));
    int n = atoi(argv[5]), ep = epoll_create1(0), inflight = 0, next = 0, up = 0, failed = 0;
    struct epoll_event evs[1024];
    double start = now();
    while (up + failed < n) {
        while (inflight < 1024 && next < n) {
            int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
            setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
            if (s < 0 || bind(s, (struct sockaddr *)&src, sizeof src)) {
                perror("socket/bind");
                return 1;
            }
            next++;
            if (connect(s, (struct sockaddr *)&dst, sizeof dst) && errno != EINPROGRESS) {
                failed++;
                close(s);
                continue;
            }
            struct epoll_event ev = {.events = EPOLLOUT, .data.fd = s};
            epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
            inflight++;
        }
        int k = epoll_wait(ep, evs, 1024, 1000);
        for (int i = 0; i < k; i++) {
            int s = evs[i].data.fd, err = 0;
            socklen_t l = sizeof err;
            getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l);
            epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL);
            inflight--;
            if (err) {
                failed++;
                close(s);
            } else {
                up++;
            }
        }
    }
    double took = now() - start;
    printf("established %d failed %d seconds %.3f rate %.0f\n", up, failed, took, up / took);
    fflush(stdout);
    if (argc > 6 && !strcmp(argv[6], "hold"))
        pause();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "load"))
        return load(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "connect"))
        return connect_many(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "paced"))
        return paced(argc, argv);
    fprintf(stderr,
            "usage: client load HOST PORT CONNS WINDOW SECONDS echo|http [SIZE]\n"
            "       client paced HOST PORT CONNS RATE SECONDS [SIZE] [poisson|constant]\n"
            "       client connect SOURCE_IP HOST PORT N [hold]\n");
    return 2;
}
