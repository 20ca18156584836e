/*
 * The floor for `throng client`: the smallest correct epoll client doing
 * the same work, with no measuring beyond a count.
 *
 * load:    client load HOST PORT CONNS WINDOW SECONDS echo|http [SIZE]
 *          keeps WINDOW requests in flight on each of CONNS connections
 *          (echo: SIZE-byte messages, default 64; http: GET / requests)
 *          for SECONDS, then prints "responses N seconds S rate R".
 * connect: client connect SOURCE_IP HOST PORT N [hold]
 *          opens N connections from SOURCE_IP (non-blocking, up to 1024 in
 *          flight), holds them, and prints "established N seconds S rate R"
 *          once all are up (or failed), then exits; with "hold", keeps
 *          them open until it is sent a signal.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
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
    int *fds = calloc(conns, sizeof *fds);
    for (int i = 0; i < conns; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return 1;
        }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fds[i] = s;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
    }
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
    fprintf(stderr,
            "usage: client load HOST PORT CONNS WINDOW SECONDS echo|http [SIZE]\n"
            "       client connect SOURCE_IP HOST PORT N [hold]\n");
    return 2;
}
