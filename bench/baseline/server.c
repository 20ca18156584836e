/*
 * The floor for `throng server`: the smallest correct epoll server doing
 * the same work. One epoll loop per thread, each with its own SO_REUSEPORT
 * listener; read, then write the reply (echo: the bytes back; http: one
 * fixed keep-alive response per request head, pipelining allowed); what
 * the socket does not take waits for EPOLLOUT.
 *
 * Usage: server PORT THREADS echo|http
 * Prints "listening on 127.0.0.1:PORT" once every listener is bound.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD (1 << 20)

static const char RESPONSE[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
static int http;
static int port;

struct conn {
    unsigned char match; /* bytes of "\r\n\r\n" matched so far */
    char *out;           /* unsent reply bytes */
    size_t out_len;
};
static struct conn *conns;

static int listener(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 65535)) {
        perror("bind/listen");
        exit(1);
    }
    if (!port) {
        socklen_t l = sizeof a;
        getsockname(s, (struct sockaddr *)&a, &l);
        port = ntohs(a.sin_port);
    }
    return s;
}

/* Sends what is pending, then `data`; keeps what the socket refuses. */
static int send_out(int fd, int ep, const char *data, size_t len) {
    struct conn *c = &conns[fd];
    if (c->out_len) {
        c->out = realloc(c->out, c->out_len + len);
        memcpy(c->out + c->out_len, data, len);
        c->out_len += len;
        data = c->out;
        len = c->out_len;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n > 0) {
            off += n;
        } else if (n < 0 && errno == EAGAIN) {
            break;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            return -1;
        }
    }
    size_t rest = len - off;
    if (rest) {
        char *keep = malloc(rest);
        memcpy(keep, data + off, rest);
        free(c->out);
        c->out = keep;
        c->out_len = rest;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
    } else if (c->out_len) {
        free(c->out);
        c->out = NULL;
        c->out_len = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
    }
    return 0;
}

static void drop(int fd) {
    free(conns[fd].out);
    memset(&conns[fd], 0, sizeof conns[fd]);
    close(fd);
}

static void *loop(void *arg) {
    int l = *(int *)arg, ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l}, evs[256];
    static __thread char buf[65536], reply[65536];
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == l) {
                int c;
                while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            if ((evs[i].events & EPOLLOUT) && send_out(fd, ep, "", 0)) {
                drop(fd);
                continue;
            }
            if (!(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                drop(fd);
                continue;
            }
            if (!http) {
                if (send_out(fd, ep, buf, r))
                    drop(fd);
                continue;
            }
            size_t out = 0;
            struct conn *c = &conns[fd];
            for (ssize_t k = 0; k < r; k++) {
                char want = (c->match & 1) ? '\n' : '\r';
                if (buf[k] == want) {
                    if (++c->match == 4) {
                        c->match = 0;
                        if (out + sizeof RESPONSE - 1 > sizeof reply) {
                            if (send_out(fd, ep, reply, out)) {
                                drop(fd);
                                goto next;
                            }
                            out = 0;
                        }
                        memcpy(reply + out, RESPONSE, sizeof RESPONSE - 1);
                        out += sizeof RESPONSE - 1;
                    }
                } else {
                    c->match = buf[k] == '\r' ? 1 : 0;
                }
            }
            if (out && send_out(fd, ep, reply, out))
                drop(fd);
        next:;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: server PORT THREADS echo|http\n");
        return 2;
    }
    port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    http = !strcmp(argv[3], "http");
    conns = calloc(MAX_FD, sizeof *conns);
    int *ls = calloc(threads, sizeof *ls);
    for (int t = 0; t < threads; t++)
        ls[t] = listener();
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    pthread_t *th = calloc(threads, sizeof *th);
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, loop, &ls[t]);
    pthread_join(th[0], NULL);
    return 0;
}
